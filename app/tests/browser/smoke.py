"""Smoke checks of the harness itself, against the stub server (stub.py) and a console-less
`crewbus serve`: they prove that chromium launches headless here, that a strict-CSP page from
127.0.0.1 loads and updates live over SSE without a reload, that axe-core runs (and fails a page
that deserves it), that screenshots are taken, and that each detector the console checks rely
on fires when it should. A console check that passes means something only if these pass.

Each check is `fn(ctx: SmokeContext)`; run.py runs them.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import harness
from harness import Browser, Failure, Pages, expect, hostile_findings, parse_csp, wait_until
from stub import HOSTILE, Stub

LIVE_DEADLINE_S = 2.0


@dataclasses.dataclass
class SmokeContext:
    browser: Browser
    stub: Stub


def check_chromium_headless(c: SmokeContext) -> None:
    """The browser is Debian's chromium, headless, the same major version as the binary says."""
    out = subprocess.run([harness.CHROMIUM, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"(\d+)\.\d+\.\d+\.\d+", out)
    expect(m, f"{harness.CHROMIUM} --version printed no version: {out!r}")
    expect(c.browser.version.split(".")[0] == m.group(1), f"the driven browser is {c.browser.version}, {harness.CHROMIUM} is {m.group(0)}")
    ctx = c.browser.context()
    try:
        page, _ = c.browser.page(ctx)
        ua = page.evaluate("navigator.userAgent")
        expect("HeadlessChrome" in ua, f"not headless: {ua}")
    finally:
        ctx.close()
    # The browser process (found by its command line: the harness's proxy flag) runs in a
    # profile Playwright made for this launch in the temp directory.
    profiles = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--proxy-server=http://127.0.0.1:9" in args:
            profiles |= {a.split(b"=", 1)[1].decode() for a in args if a.startswith(b"--user-data-dir=")}
    expect(profiles, "no chromium process of this run names its --user-data-dir")
    for p in profiles:
        expect(Path(p).name.startswith("playwright_chromiumdev_profile-") and Path(p).parent == Path(tempfile.gettempdir()), f"chromium runs in the profile {p}, not a fresh one of this launch")


def check_strict_csp_page_live_over_sse(c: SmokeContext) -> None:
    """/clean: the CSP header arrives and holds (no violation), the escaped hostile bodies are
    inert and literal, an event published on /events appears within 2 s with no navigation, a
    screenshot is saved and axe finds nothing serious."""
    pages = Pages(c.browser, "smoke", "strict_csp_page")
    ctx = c.browser.context()
    try:
        page, watch = c.browser.page(ctx)
        resp = page.goto(c.stub.url + "/clean")
        expect(resp and resp.status == 200, f"GET /clean answered {resp and resp.status}")
        csp = parse_csp(watch.document.headers.get("content-security-policy", ""))
        expect(csp.get("script-src") == ["'self'"], f"CSP script-src is {csp.get('script-src')}")
        wait_until(lambda: watch.eventsource_open, 5, "the page's EventSource on /events answered 200", page=page)
        wait_until(lambda: c.stub.subscribers() > 0, 5, "the stub saw the page's SSE subscription", page=page)
        marker = uuid.uuid4().hex
        page.evaluate("(m) => { window.__noReload = m; }", marker)
        before = watch.navigations
        text = f"live {uuid.uuid4().hex[:8]}"
        c.stub.publish(text)
        t0 = time.monotonic()
        page.locator("#messages .body", has_text=text).wait_for(timeout=LIVE_DEADLINE_S * 1000)
        took = time.monotonic() - t0
        expect(watch.navigations == before, f"{watch.navigations - before} navigation(s) during the live update")
        expect(page.evaluate("window.__noReload") == marker, "the page was reloaded (the marker is gone)")
        found = hostile_findings(page, watch, HOSTILE, "/static/")
        expect(not found, f"the escaped bodies are not inert: {found}")
        watch.assert_clean("/clean")
        shot = pages.shoot(page, "clean")
        expect(shot.stat().st_size > 1000, f"the screenshot {shot} is empty")
        print(f"       live update after {took * 1000:.0f} ms; screenshot {shot}", flush=True)
    finally:
        ctx.close()


def check_inline_script_blocked_by_csp(c: SmokeContext) -> None:
    """/inline: an inline <script>alert()</script> under the CSP runs nothing, and the page
    reports the violation (so a page that tried is seen)."""
    ctx = c.browser.context()
    try:
        page, watch = c.browser.page(ctx)
        page.goto(c.stub.url + "/inline")
        wait_until(lambda: watch.csp_violations(), 5, "the CSP violation of the inline script was reported", page=page)
        expect(not watch.dialogs, f"the inline script ran: {watch.dialogs}")
    finally:
        ctx.close()


def check_detectors_fire_without_csp(c: SmokeContext) -> None:
    """/no-csp puts the hostile bodies in with innerHTML: the findings must name the dialog, the
    injected img[src=x], its onerror handler and the javascript: link."""
    ctx = c.browser.context()
    try:
        page, watch = c.browser.page(ctx)
        page.goto(c.stub.url + "/no-csp")
        wait_until(lambda: watch.dialogs, 5, "the dialog of the injected onerror handler", page=page)
        found = " | ".join(hostile_findings(page, watch, HOSTILE, "/static/"))
        for needle in ("dialog fired", "img[src=x]", "onerror", "javascript:", "not shown literally"):
            expect(needle in found, f"the findings miss {needle!r}: {found}")
    finally:
        ctx.close()


def check_axe_fails_an_inaccessible_page(c: SmokeContext) -> None:
    """axe-core on /inaccessible (an image without alt, a nameless button, an unlabelled input,
    no lang) must fail the page; and axe cannot be injected under the CSP, which is why the axe
    runs use a bypass_csp context."""
    pages = Pages(c.browser, "smoke", "inaccessible")
    ctx = c.browser.context()
    try:
        page, _ = c.browser.page(ctx)
        page.goto(c.stub.url + "/inaccessible")
        try:
            pages.axe(page, "inaccessible")
        except Failure as e:
            expect("serious/critical" in str(e), f"axe failed the page, but not for its violations: {e}")
        else:
            raise Failure("axe-core found no serious or critical violation on /inaccessible")
        page.goto(c.stub.url + "/clean")
        try:
            page.add_script_tag(path=str(harness.axe_script()))
        except Exception:  # noqa: BLE001 - refused by the CSP: what this asserts
            pass
        expect(page.evaluate("typeof window.axe") == "undefined", "axe-core was injected despite the page's CSP")
    finally:
        ctx.close()


def check_javascript_off(c: SmokeContext) -> None:
    """With JavaScript off the server-rendered bodies read as text, and no stream is opened."""
    ctx = c.browser.context(javascript=False)
    try:
        page, watch = c.browser.page(ctx)
        page.goto(c.stub.url + "/clean")
        texts = page.locator("#messages .body").all_text_contents()
        expect(texts == HOSTILE, f"with JavaScript off the bodies read {texts}")
        expect(not watch.eventsources, f"an EventSource opened with JavaScript off: {watch.eventsources}")
    finally:
        ctx.close()


CHECKS = [
    ("chromium launches headless (Debian's chromium, the driven version, a fresh profile)", check_chromium_headless),
    ("a strict-CSP page on 127.0.0.1: live over SSE without a reload, screenshot, axe", check_strict_csp_page_live_over_sse),
    ("an inline script under that CSP runs nothing and is reported", check_inline_script_blocked_by_csp),
    ("the hostile-body detectors fire on a page that injects markup (no CSP)", check_detectors_fire_without_csp),
    ("axe-core fails an inaccessible page; it cannot be injected under the CSP", check_axe_fails_an_inaccessible_page),
    ("JavaScript off: the server-rendered text reads, no stream opens", check_javascript_off),
]

