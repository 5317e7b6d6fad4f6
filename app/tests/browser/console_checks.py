"""The console in a real browser (issue 18 item 7), written against the console's page contract
(notes: "The console's page contract"): URLs, element ids, data- attributes and what `serve`
prints. Each check gets a fresh `crewbus serve` (harness.server) and its own browser contexts;
every page it visits is checked for the common frame (`<main>`, `<h1>`, the Console nav, the
sign-out form, a `_csrf` in every form, the Content-Security-Policy, no dialog, page error, CSP
violation, off-loopback request or broken asset), screenshotted and run through axe-core.

Paths are followed as a person would (overview → team → conversation by their links) where the
contract names the link; the URLs found that way are then reused (the scoped operator's 404s),
so nothing depends on whether `{team}` is a name or an id.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
import urllib.parse
import uuid
from typing import Any, Callable

from playwright.sync_api import BrowserContext, Page, Response

import harness
from harness import Browser, Crewbus, Failure, Pages, Watch, expect, hostile_findings, parse_csp, wait_until

CONSOLE = "/console"
STATIC_PREFIX = "/console/static/"
COOKIE = "crewbus_session"
# A message sent over HTTP must be on the open page this soon (issue 18 item 7).
LIVE_DEADLINE_S = 2.0
# A receipt state change (fetch, confirm) must show this soon.
RECEIPT_DEADLINE_S = 5.0
# Crockford base32 (no I, L, O, U), four groups of four.
CODE_RE = re.compile(r"[0-9A-HJKMNP-TV-Z]{4}(-[0-9A-HJKMNP-TV-Z]{4}){3}")
RECEIPT_STATES = {"stored", "handed_out", "confirmed", "acknowledged", "pending"}
# The cut of a long body on the conversation page.
CUT_BYTES = 2048
NO_CLI_ON_MEMORY = "needs `crewbus operator add` / `team add` beside the server; the memory store (--ephemeral) has none (runs on sqlite and postgres)"


@dataclasses.dataclass
class Session:
    ctx: BrowserContext
    page: Page
    watch: Watch


@dataclasses.dataclass
class Ctx:
    """What a check gets: its server, the browser, its screenshots, and the contexts it opened
    (closed after the check)."""

    bus: Crewbus
    browser: Browser
    pages: Pages
    contexts: list[BrowserContext] = dataclasses.field(default_factory=list)

    def url(self, path: str) -> str:
        return self.bus.url + path

    def context(self, **kw: Any) -> BrowserContext:
        ctx = self.browser.context(**kw)
        self.contexts.append(ctx)
        return ctx

    def session(self, **kw: Any) -> Session:
        ctx = self.context(**kw)
        page, watch = self.browser.page(ctx)
        return Session(ctx, page, watch)

    def close(self) -> None:
        for ctx in self.contexts:
            try:
                ctx.close()
            except Exception:  # noqa: BLE001, S110 - a context of a dead browser closes with it
                pass


# --- helpers on pages ----------------------------------------------------------------------------


def path_of(url: str) -> str:
    return urllib.parse.urlsplit(url).path.rstrip("/") or "/"


def submit_button(page: Page, form: str) -> Any:
    return page.locator(f"{form} button:not([type=button]):not([type=reset]), {form} input[type=submit]").first


def submit(page: Page, form: str) -> Response:
    """Clicks the submit button of `form` (a selector); the answer to its POST (a redirect is
    that answer, not the page it leads to), once the resulting page has loaded."""
    with page.expect_response(lambda r: r.request.method == "POST" and r.request.resource_type == "document") as info:
        submit_button(page, form).click()
    page.wait_for_load_state("load")
    return info.value


def goto(s: Session, url: str, status: int = 200) -> Response:
    resp = s.page.goto(url)
    expect(resp is not None, f"GET {url}: no response")
    expect(resp.status == status, f"GET {url} answered {resp.status}, not {status}")
    return resp


def check_csp(resp: Response | None, where: str) -> None:
    """The contract's policy: present, no 'unsafe-*' anywhere, scripts from 'self' only."""
    expect(resp is not None, f"{where}: no document response seen")
    header = resp.all_headers().get("content-security-policy")
    expect(header, f"{where}: no Content-Security-Policy header")
    low = header.lower()
    for bad in ("'unsafe-inline'", "'unsafe-eval'", "'unsafe-hashes'", "'strict-dynamic'"):
        expect(bad not in low, f"{where}: the CSP allows {bad}: {header}")
    d = parse_csp(header)
    want = {
        "default-src": ["'none'"],
        "script-src": ["'self'"],
        "frame-ancestors": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
    }
    for k, v in want.items():
        expect(d.get(k) == v, f"{where}: CSP {k} is {d.get(k)}, not {v} ({header})")
    expect("style-src" in d and "*" not in d["style-src"], f"{where}: CSP style-src is {d.get('style-src')}")


def check_frame(s: Session, where: str, *, signed_in: bool = True) -> None:
    """The frame every page has (contract: a `<main>`, an `<h1>`, `nav[aria-label=Console]` with
    Overview, Push and Storage and the sign-out form; a `_csrf` in every form), its CSP, and a
    clean watch."""
    page = s.page
    expect(page.locator("main").count() == 1, f"{where}: {page.locator('main').count()} <main> elements, not 1")
    expect(page.locator("h1").count() >= 1, f"{where}: no <h1>")
    if signed_in:
        nav = page.locator('nav[aria-label="Console"]')
        expect(nav.count() == 1, f'{where}: {nav.count()} nav[aria-label="Console"]')
        links = [t.strip() for t in nav.locator("a").all_text_contents()]
        for want in ("Overview", "Push", "Storage"):
            expect(want in links, f"{where}: the Console nav has no {want} link (links: {links})")
        so = page.locator("form#sign-out")
        expect(so.count() == 1, f"{where}: no form#sign-out")
        expect((so.get_attribute("method") or "").lower() == "post", f"{where}: form#sign-out is not a POST form")
        action = urllib.parse.urljoin(page.url, so.get_attribute("action") or "")
        expect(path_of(action) == CONSOLE + "/sign-out", f"{where}: form#sign-out posts to {action}")
        forms = page.locator("form")
        for i in range(forms.count()):
            f = forms.nth(i)
            token = f.locator('input[type=hidden][name="_csrf"]')
            ident = f.get_attribute("id") or f.get_attribute("class") or f.get_attribute("action")
            expect(token.count() == 1, f"{where}: form {ident} has {token.count()} hidden _csrf inputs")
            expect(re.fullmatch(r"[0-9a-f]{16,}", token.get_attribute("value") or ""), f"{where}: form {ident} has an empty or odd _csrf")
    check_csp(s.watch.document, where)
    s.watch.assert_clean(where)


def visit(c: Ctx, s: Session, name: str, *, signed_in: bool = True) -> None:
    """The common checks of the page `s` shows, its screenshot and its axe run."""
    check_frame(s, name, signed_in=signed_in)
    c.pages.shoot(s.page, name)


def check_session_cookie(ctx: BrowserContext, where: str) -> dict:
    cookies = [k for k in ctx.cookies() if k["name"] == COOKIE]
    expect(len(cookies) == 1, f"{where}: {len(cookies)} {COOKIE} cookies: {[k['name'] for k in ctx.cookies()]}")
    k = cookies[0]
    expect(k["httpOnly"], f"{where}: {COOKIE} is not HttpOnly")
    expect(k["sameSite"] == "Strict", f"{where}: {COOKIE} is SameSite={k['sameSite']}")
    expect(k["path"] == CONSOLE, f"{where}: {COOKIE} has Path={k['path']}, not {CONSOLE}")
    expect(re.fullmatch(r"[0-9a-f]{64}", k["value"]), f"{where}: {COOKIE} is not 32 bytes of hex")
    return k


def sign_in_with_code(c: Ctx, **kw: Any) -> Session:
    """Opens the printed console URL (it pre-fills the code) and submits: 303 to /console."""
    s = c.session(**kw)
    goto(s, c.bus.console_url)
    value = s.page.locator('form#sign-in input[name="code"]').input_value()
    expect(value == c.bus.sign_in_code, f"the sign-in form is not pre-filled with the printed code ({value!r})")
    post = submit(s.page, "form#sign-in")
    expect(post.status == 303, f"POST /console/sign-in with the printed code answered {post.status}, not 303")
    expect(path_of(s.page.url) == CONSOLE, f"after signing in the browser is at {s.page.url}, not {CONSOLE}")
    check_session_cookie(s.ctx, "sign-in with the code")
    return s


def sign_in_with_token(c: Ctx, token: str) -> Session:
    s = c.session()
    goto(s, c.url(CONSOLE + "/sign-in"))
    s.page.locator('form#sign-in input[name="token"]').fill(token)
    post = submit(s.page, "form#sign-in")
    expect(post.status == 303, f"POST /console/sign-in with an operator token answered {post.status}, not 303")
    expect(path_of(s.page.url) == CONSOLE, f"after signing in the browser is at {s.page.url}, not {CONSOLE}")
    check_session_cookie(s.ctx, "sign-in with a token")
    return s


def refused_sign_in(c: Ctx, s: Session, fill: Callable[[Page], None], what: str) -> None:
    """Submits the sign-in form as `fill` leaves it: 401, an alert, no session."""
    if path_of(s.page.url) != CONSOLE + "/sign-in":
        goto(s, c.url(CONSOLE + "/sign-in"))
    fill(s.page)
    post = submit(s.page, "form#sign-in")
    expect(post.status == 401, f"{what}: POST /console/sign-in answered {post.status}, not 401")
    expect(path_of(s.page.url) == CONSOLE + "/sign-in", f"{what}: the browser went to {s.page.url}")
    alert = s.page.locator("[role=alert]")
    expect(alert.count() >= 1 and alert.first.is_visible(), f"{what}: no visible [role=alert] on the refusal")
    expect(not [k for k in s.ctx.cookies() if k["name"] == COOKIE], f"{what}: a {COOKIE} cookie was set")


def team_url(s: Session, team: str) -> str:
    """On the overview: the link of `team`'s section to its team page."""
    section = s.page.locator(f'section[data-team="{team}"]')
    expect(section.count() == 1, f'the overview has {section.count()} section[data-team="{team}"]')
    hrefs = [urllib.parse.urljoin(s.page.url, h) for h in section.locator("a[href]").evaluate_all("els => els.map(e => e.getAttribute('href'))")]
    teams = [h for h in hrefs if re.fullmatch(CONSOLE + r"/teams/[^/]+", path_of(h))]
    expect(teams, f'section[data-team="{team}"] has no link to a team page (links: {hrefs})')
    return teams[0]


def open_team(s: Session, team: str) -> str:
    """Overview → the team's link → its page (table#agents); the team page's URL."""
    if path_of(s.page.url) != CONSOLE:
        goto(s, urllib.parse.urljoin(s.page.url, CONSOLE))
    href = team_url(s, team)
    link = s.page.locator(f'section[data-team="{team}"] a[href="{urllib.parse.urlsplit(href).path}"]').first
    if link.count():
        link.click()
        s.page.wait_for_url(href)
    else:
        goto(s, href)
    expect(s.page.locator("table#agents").count() == 1, f"the team page {s.page.url} has no table#agents")
    return s.page.url


def open_conversation(s: Session, conversation: str) -> str:
    """On the team page: the conversation's link → its page (ol#messages); its URL."""
    link = s.page.locator(f'ul#conversations a[data-conversation="{conversation}"]')
    expect(link.count() == 1, f'the team page has {link.count()} ul#conversations a[data-conversation="{conversation}"]')
    with s.page.expect_navigation():
        link.click()
    expect(s.page.locator("ol#messages").count() == 1, f"the conversation page {s.page.url} has no ol#messages")
    expect(conversation in s.page.url, f"the conversation page's URL {s.page.url} does not name {conversation}")
    return s.page.url


def team_segment(page_url: str) -> str:
    """`/console/teams/{team}/…` → `/console/teams/{team}`."""
    m = re.match(CONSOLE + r"/teams/[^/]+", urllib.parse.urlsplit(page_url).path)
    expect(m, f"{page_url} is not under /console/teams/{{team}}")
    return m.group(0)


def message_li(message_id: str) -> str:
    return f'ol#messages li.message[data-message="{message_id}"]'


def receipt(message_id: str, recipient: str, state: str | None = None) -> str:
    sel = f'{message_li(message_id)} li.receipt[data-recipient="{recipient}"]'
    return sel + (f'[data-state="{state}"]' if state else "")


def wait_live_stream(s: Session) -> None:
    """The page's EventSource on /console/events answered 200 (its feed is open)."""
    wait_until(lambda: s.watch.eventsource_open, 5, "the page's EventSource (/console/events) answered 200", page=s.page)
    expect(any(path_of(u) == CONSOLE + "/events" for u in s.watch.eventsources), f"the page's EventSource is not /console/events: {s.watch.eventsources}")


def mark_no_reload(s: Session) -> Callable[[str], None]:
    """A marker in the page's window and the navigation count now; the returned check fails if
    the page navigated or reloaded since."""
    marker = uuid.uuid4().hex
    s.page.evaluate("(m) => { window.__crewbusNoReload = m; }", marker)
    before = s.watch.navigations

    def still(where: str) -> None:
        expect(s.watch.navigations == before, f"{where}: the page navigated {s.watch.navigations - before} time(s)")
        expect(s.page.evaluate("window.__crewbusNoReload") == marker, f"{where}: the page was reloaded (its window is new)")

    return still


def api_post(s: Session, url: str, form: dict[str, str], origin: str) -> Any:
    """A form POST through the context's own cookie jar (what a forged or stripped form would
    send), with the console's Origin; the redirect is not followed."""
    return s.ctx.request.post(url, form=form, headers={"Origin": origin}, max_redirects=0)


def appears(locator: Any, timeout_s: float, what: str, now: Callable[[], str] | None = None) -> None:
    """Waits until `locator` matches an element (Playwright polls it), else `Failure` naming
    `what` (and what `now` says is there instead)."""
    try:
        locator.first.wait_for(timeout=timeout_s * 1000)
    except Exception as e:  # noqa: BLE001 - Playwright's TimeoutError, said as the check's failure
        seen = ""
        if now is not None:
            try:
                seen = f" (now: {now()})"
            except Exception:  # noqa: BLE001
                seen = ""
        raise Failure(f"{what}: not within {timeout_s:g} s{seen}") from e


def first_int(text: str) -> int:
    m = re.search(r"\d+", text or "")
    expect(m, f"no number in {text!r}")
    return int(m.group(0))


def rand(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# Unicode's explicit bidirectional controls (embeddings, overrides, isolates), as "Trojan Source"
# uses them: an agent's title `report \u202egnp.exe` shown as "report exe.png".
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
SPOOF_TITLE = "report \u202egnp.exe"
SPOOF_BODY = "invoice \u202efdp.exe\u202c and \u2067x\u2069"

# For each element matching the selector, each text node holding the needle: where its first and
# last characters are drawn (left edges), whether the text node holds a raw control, and the
# nearest element between it and the matched one (inclusive) whose computed `unicode-bidi`
# isolates it (`<bdi>`, `dir`).
BIDI_PROBE = """([sel, needle]) => {
  const out = [];
  for (const el of document.querySelectorAll(sel)) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const i = n.data.indexOf(needle);
      if (i < 0) continue;
      const left = (k) => { const r = document.createRange(); r.setStart(n, k); r.setEnd(n, k + 1); return r.getBoundingClientRect().left; };
      let isolated = null;
      for (let p = n.parentElement; p; p = p.parentElement) {
        const u = getComputedStyle(p).unicodeBidi;
        if (u === "isolate" || u === "isolate-override" || u === "plaintext") { isolated = p.tagName.toLowerCase(); break; }
        if (p === el) break;
      }
      out.push({first: left(i), last: left(i + needle.length - 1), raw: /[\u202a-\u202e\u2066-\u2069]/.test(n.data), isolated});
    }
  }
  return out;
}"""


def bidi_inert(s: Session, sel: str, needle: str, where: str) -> None:
    """The text `needle` (ASCII, left to right) inside `sel` is drawn in its own order, in an
    isolated element, next to no raw bidirectional control."""
    found = s.page.evaluate(BIDI_PROBE, [sel, needle])
    expect(found, f"{where}: no {needle!r} in {sel}")
    for f in found:
        expect(not f["raw"], f"{where}: {sel} holds a raw bidirectional control beside {needle!r}")
        expect(f["isolated"], f"{where}: {needle!r} in {sel} is in no isolated element (<bdi>, dir=auto)")
        expect(f["first"] < f["last"], f"{where}: {needle!r} in {sel} is drawn reversed (its first character at x {f['first']:.0f}, its last at {f['last']:.0f})")


# --- the checks ------------------------------------------------------------------------------------


def dev_agents_talk_over_http(c: Ctx) -> None:
    """The harness's own check (no console needed): the dev agents the server printed send,
    fetch and confirm over the HTTP API."""
    alice, bob = c.bus.agent("alice"), c.bus.agent("bob")
    conv = alice.create_conversation(["bob"], "harness")
    sent = alice.send(conv, "hello from the harness")
    got = [d for d in bob.fetch() if d["message"]["id"] == sent["id"]]
    expect(len(got) == 1 and got[0]["body"] == "hello from the harness", f"bob fetched {got}")
    results = bob.confirm([got[0]["delivery_id"]])
    expect(results[0]["outcome"] == "confirmed", f"bob's confirm answered {results}")
    expect(bob.fetch(wait_ms=0) == [], "bob's inbox is not empty after the confirm")


def sign_in_with_printed_code(c: Ctx) -> None:
    line = c.bus.console
    expect(line and line.get("operator") == "dev", f"the console line names no operator dev: {line}")
    url = urllib.parse.urlsplit(c.bus.console_url)
    listening = urllib.parse.urlsplit(c.bus.url)
    expect((url.scheme, url.netloc) == (listening.scheme, listening.netloc), f"the console URL {c.bus.console_url} is not on the listener {c.bus.url}")
    expect(url.path == CONSOLE + "/sign-in", f"the console URL's path is {url.path}")
    code = c.bus.sign_in_code
    expect(urllib.parse.parse_qs(url.query).get("code") == [code], f"the console URL carries no code={code}")
    expect(CODE_RE.fullmatch(code), f"the sign-in code {code!r} is not 4 groups of 4 Crockford base32 characters")
    expires = dt.datetime.fromisoformat(line["expires_at"].replace("Z", "+00:00"))
    left = (expires - dt.datetime.now(dt.timezone.utc)).total_seconds()
    expect(540 <= left <= 610, f"the code expires in {left:.0f} s, not 10 min")

    anon = harness.http("GET", c.url(CONSOLE))
    expect(anon.status == 303, f"GET /console without a session answered {anon.status}, not 303")
    expect(path_of(urllib.parse.urljoin(c.bus.url, anon.headers.get("location", ""))) == CONSOLE + "/sign-in", f"GET /console without a session goes to {anon.headers.get('location')}")

    form = c.session()
    goto(form, c.bus.console_url)
    for sel in ("form#sign-in", 'form#sign-in input[name="code"]', 'form#sign-in input[name="token"]'):
        expect(form.page.locator(sel).count() == 1, f"the sign-in page has no {sel}")
    expect(submit_button(form.page, "form#sign-in").count() == 1, "the sign-in form has no submit button")
    visit(c, form, "sign-in", signed_in=False)

    s = sign_in_with_code(c)
    visit(c, s, "overview after sign-in")


def code_used_twice_is_refused(c: Ctx) -> None:
    first = sign_in_with_code(c)
    second = c.session()
    goto(second, c.bus.console_url)
    refused_sign_in(c, second, lambda p: None, "the printed code used a second time")
    visit(c, second, "sign-in refused (code used twice)", signed_in=False)
    goto(second, c.url(CONSOLE))
    expect(path_of(second.page.url) == CONSOLE + "/sign-in", f"after the refusal /console opened {second.page.url}")
    goto(first, c.url(CONSOLE))
    expect(path_of(first.page.url) == CONSOLE, "the first session no longer opens /console")


def sign_in_with_operator_token(c: Ctx) -> None:
    # Beside the memory store no `operator add` reaches the server: its every-team operator
    # comes from `serve --dev-operator-token-file`.
    token = c.bus.dev_operator_token if not c.bus.beside else c.bus.operator_token(rand("ops"))
    s = sign_in_with_token(c, token)
    expect(s.page.locator(f'section[data-team="{c.bus.team}"]').count() == 1, "an all-teams operator does not see the dev team on the overview")
    visit(c, s, "overview (operator token)")

    wrong = token[:-1] + ("0" if token[-1] != "0" else "1")
    bad = c.session()
    refused_sign_in(c, bad, lambda p: p.locator('form#sign-in input[name="token"]').fill(wrong), "a wrong operator token")
    visit(c, bad, "sign-in refused (wrong token)", signed_in=False)
    agent = c.session()
    refused_sign_in(c, agent, lambda p: p.locator('form#sign-in input[name="token"]').fill(c.bus.tokens["alice"]), "an agent's token")


def overview_shows_dev_team(c: Ctx) -> None:
    s = sign_in_with_code(c)
    sec = s.page.locator(f'section[data-team="{c.bus.team}"]')
    expect(sec.count() == 1, f'the overview has {sec.count()} section[data-team="{c.bus.team}"]')
    expect(c.bus.team in sec.inner_text(), f"the dev team's section does not name {c.bus.team}")
    for sel in (".chart", "table.chart-data", "[data-field=pending]", "[data-field=oldest]", "[data-field=parked]"):
        expect(sec.locator(sel).count() >= 1, f"the dev team's section has no {sel}")
    appears(sec.locator(".chart canvas, canvas.chart"), 5, "the dev team's chart drew a canvas")
    team_url(s, c.bus.team)

    alice = c.bus.agent("alice")
    conv = alice.create_conversation(["bob"])
    alice.send(conv, "one for bob, not fetched")
    goto(s, c.url(CONSOLE))
    pending = first_int(sec.locator("[data-field=pending]").first.inner_text())
    expect(pending == 1, f"the dev team shows {pending} deliveries pending, not 1 (one message to bob, not fetched)")
    visit(c, s, "overview with one pending")


def live_message_and_receipt(c: Ctx) -> None:
    alice, bob = c.bus.agent("alice"), c.bus.agent("bob")
    conv = alice.create_conversation(["bob"], "live")
    s = sign_in_with_code(c)
    open_team(s, c.bus.team)
    open_conversation(s, conv)
    visit(c, s, "conversation (empty)")
    wait_live_stream(s)
    still = mark_no_reload(s)

    body = f"hello bob, live {uuid.uuid4().hex[:8]}"
    sent = alice.send(conv, body)
    t0 = time.monotonic()
    li = s.page.locator(message_li(sent["id"]))
    appears(li, LIVE_DEADLINE_S, f"alice's message {sent['id']} on the open conversation page")
    took = time.monotonic() - t0
    still("the new message")
    expect(li.get_attribute("data-seq") == str(sent["seq"]), f"the message's data-seq is {li.get_attribute('data-seq')}, not {sent['seq']}")
    expect(li.locator(".body").inner_text() == body, f"the message's .body reads {li.locator('.body').inner_text()!r}")
    expect("alice" in li.inner_text(), "the message does not name its sender alice")
    r = s.page.locator(receipt(sent["id"], "bob"))
    appears(r, RECEIPT_DEADLINE_S, "bob's receipt on alice's message")
    state = r.get_attribute("data-state")
    expect(state in RECEIPT_STATES, f"bob's receipt has data-state={state!r}")
    expect(state not in ("handed_out", "confirmed", "acknowledged"), f"bob's receipt is {state} before bob fetched")
    expect(s.page.locator(f'{message_li(sent["id"])} li.receipt[data-recipient="alice"]').count() == 0, "the sender alice has a receipt")

    deliveries = [d for d in bob.fetch() if d["message"]["id"] == sent["id"]]
    expect(len(deliveries) == 1, f"bob's fetch handed out {len(deliveries)} deliveries of the message")
    state_now = lambda: f"data-state={r.get_attribute('data-state')!r}"  # noqa: E731
    appears(s.page.locator(receipt(sent["id"], "bob", "handed_out")), RECEIPT_DEADLINE_S, "bob's receipt turning handed_out after his fetch", state_now)
    results = bob.confirm([deliveries[0]["delivery_id"]])
    expect(results and results[0]["outcome"] == "confirmed", f"bob's confirm answered {results}")
    t1 = time.monotonic()
    appears(s.page.locator(receipt(sent["id"], "bob", "confirmed")), RECEIPT_DEADLINE_S, "bob's receipt turning confirmed after his confirm", state_now)
    still("the receipt turning confirmed")
    print(f"       message on the page {took * 1000:.0f} ms after the send; confirmed {(time.monotonic() - t1) * 1000:.0f} ms after the confirm", flush=True)
    visit(c, s, "conversation (live message confirmed)")


def hostile_bodies_run_nothing(c: Ctx) -> None:
    alice = c.bus.agent("alice")
    conv = alice.create_conversation(["bob"], "<b>hostile title</b>")
    s = sign_in_with_code(c)
    open_team(s, c.bus.team)
    open_conversation(s, conv)
    wait_live_stream(s)
    still = mark_no_reload(s)
    sent = [alice.send(conv, b) for b in harness.HOSTILE_BODIES]
    for m in sent:
        appears(s.page.locator(message_li(m["id"])), LIVE_DEADLINE_S, f"the hostile message {m['id']} on the open page")
    still("the hostile bodies arriving live")
    found = hostile_findings(s.page, s.watch, harness.HOSTILE_BODIES, STATIC_PREFIX, "ol#messages li.message .body")
    expect(not found, f"live: hostile bodies were not inert: {found}")
    expect(s.page.locator("b", has_text="hostile title").count() == 0, "the conversation's title <b>hostile title</b> became markup")
    visit(c, s, "conversation (hostile bodies, live)")

    s.page.reload()
    found = hostile_findings(s.page, s.watch, harness.HOSTILE_BODIES, STATIC_PREFIX, "ol#messages li.message .body")
    expect(not found, f"server-rendered: hostile bodies were not inert: {found}")
    visit(c, s, "conversation (hostile bodies, rendered)")

    team = team_segment(s.page.url)
    for i, m in enumerate(sent):
        goto(s, c.url(f"{team}/messages/{m['id']}"))
        found = hostile_findings(s.page, s.watch, [harness.HOSTILE_BODIES[i]], STATIC_PREFIX, "#body")
        expect(not found, f"message page: a hostile body was not inert: {found}")
        check_frame(s, f"message page of hostile body {i + 1}")
    c.pages.shoot(s.page, "message (hostile body)")
    expect(not s.watch.dialogs, f"dialogs fired: {s.watch.dialogs}")


def bidi_controls_are_shown_not_obeyed(c: Ctx) -> None:
    """A title and a body with bidirectional controls (issue 33 item 3): on the team page, the
    conversation page (live and rendered) and the message page the spoofed words are drawn in
    their own order, isolated, the controls shown rather than obeyed; the tab title holds none."""
    alice = c.bus.agent("alice")
    conv = alice.create_conversation(["bob"], SPOOF_TITLE)
    s = sign_in_with_code(c)
    open_team(s, c.bus.team)
    bidi_inert(s, f'ul#conversations a[data-conversation="{conv}"]', "gnp.exe", "team page")
    open_conversation(s, conv)
    wait_live_stream(s)
    sent = alice.send(conv, SPOOF_BODY)
    appears(s.page.locator(message_li(sent["id"])), LIVE_DEADLINE_S, "the spoofing message on the open page")
    bidi_inert(s, "h1", "gnp.exe", "conversation page")
    bidi_inert(s, f"{message_li(sent['id'])} .body", "fdp.exe", "conversation page, live")
    expect(not BIDI_CONTROLS.search(s.page.title()), f"the conversation page's title holds a raw control: {s.page.title()!r}")
    s.page.reload()
    bidi_inert(s, f"{message_li(sent['id'])} .body", "fdp.exe", "conversation page, rendered")
    visit(c, s, "conversation (bidirectional controls)")
    goto(s, c.url(f"{team_segment(s.page.url)}/messages/{sent['id']}"))
    bidi_inert(s, "#body", "fdp.exe", "message page")
    expect(not BIDI_CONTROLS.search(s.page.title()), f"the message page's title holds a raw control: {s.page.title()!r}")
    visit(c, s, "message (bidirectional controls)")


def post_without_csrf_refused(c: Ctx) -> None:
    bob = c.bus.agent("bob")
    s = sign_in_with_code(c)
    open_team(s, c.bus.team)
    row = 'table#agents tr[data-agent="bob"]'
    form = f"{row} form.revoke"
    expect(s.page.locator(form).count() == 1, "bob's row has no form.revoke")
    removed = s.page.locator(form).evaluate("f => { const i = f.querySelector('input[name=_csrf]'); if (i) i.remove(); return !!i; }")
    expect(removed, "bob's form.revoke has no _csrf input to remove")
    post = submit(s.page, form)
    expect(post.status == 403, f"the revoke form posted without _csrf answered {post.status}, not 403")
    c.pages.shoot(s.page, "403 (no csrf)")
    expect(bob.call("GET", "/v1/me").status == 200, "bob was revoked by a POST without _csrf")

    goto(s, c.url(CONSOLE))
    token = s.page.locator('form#sign-out input[name="_csrf"]').get_attribute("value")
    action = urllib.parse.urljoin(s.page.url, s.page.locator("form#sign-out").get_attribute("action"))
    for what, fields in (("no _csrf", {}), ("a wrong _csrf", {"_csrf": "0" * len(token)}), ("an empty _csrf", {"_csrf": ""})):
        r = api_post(s, action, fields, c.bus.url)
        expect(r.status == 403, f"POST {action} with {what} answered {r.status}, not 403")
    goto(s, c.url(CONSOLE))
    expect(path_of(s.page.url) == CONSOLE, "the refused sign-outs ended the session")
    # The control: the same request with the page's token is accepted (so the 403s were the token's).
    r = api_post(s, action, {"_csrf": token}, c.bus.url)
    expect(r.status == 303, f"POST {action} with the page's _csrf answered {r.status}, not 303")


def revoke_from_console_makes_next_call_401(c: Ctx) -> None:
    alice, bob = c.bus.agent("alice"), c.bus.agent("bob")
    expect(bob.call("GET", "/v1/me").status == 200, "bob's token does not work before the revoke")
    s = sign_in_with_code(c)
    team = open_team(s, c.bus.team)
    row = 'table#agents tr[data-agent="bob"]'
    expect(s.page.locator(f"{row} [data-field=status]").inner_text().strip() == "active", "bob's status is not active")
    for field in ("last-active", "pending", "oldest"):
        expect(s.page.locator(f"{row} [data-field={field}]").count() == 1, f"bob's row has no [data-field={field}]")
    visit(c, s, "team")
    post = submit(s.page, f"{row} form.revoke")
    expect(post.status in (200, 303), f"the revoke form answered {post.status}")
    me = bob.call("GET", "/v1/me")
    expect(me.status == 401, f"bob's next call after the console revoked him answered {me.status}, not 401")
    expect(alice.call("GET", "/v1/me").status == 200, "alice lost access when bob was revoked")
    goto(s, team)
    expect(s.page.locator(f"{row} [data-field=status]").inner_text().strip() == "revoked", "bob's row does not say revoked")
    expect(s.page.locator(f"{row} form.revoke").count() == 0, "a revoked agent still has a revoke form")
    expect(s.page.locator('table#agents tr[data-agent="alice"] form.revoke').count() == 1, "alice (active) has no revoke form")
    visit(c, s, "team (bob revoked)")


def scoped_operator_sees_404(c: Ctx) -> None:
    alice = c.bus.agent("alice")
    run = alice.ok("POST", "/v1/runs")["id"]
    conv = alice.create_conversation(["bob"], "local only")
    msg = alice.send(conv, "for team local's eyes", run=run)
    dev = sign_in_with_code(c)
    team = open_team(dev, c.bus.team)
    revoke = urllib.parse.urljoin(team, dev.page.locator('table#agents tr[data-agent="bob"] form.revoke').get_attribute("action"))
    conversation = open_conversation(dev, conv)
    base = team_segment(team)
    urls = {
        "team": team,
        "conversation": conversation,
        "message": c.url(f"{base}/messages/{msg['id']}"),
        "runs": c.url(f"{base}/runs"),
        "run": c.url(f"{base}/runs/{run}"),
    }
    for name, u in urls.items():
        goto(dev, u)  # the dev operator (every team) sees each

    other = rand("other")
    c.bus.cli("team", "add", other)
    token = c.bus.operator_token(rand("carol"), other)
    s = sign_in_with_token(c, token)
    expect(s.page.locator(f'section[data-team="{other}"]').count() == 1, f"the scoped operator does not see its team {other}")
    expect(s.page.locator(f'section[data-team="{c.bus.team}"]').count() == 0, f"the scoped operator sees team {c.bus.team} on the overview")
    visit(c, s, "overview (operator of another team)")
    for name, u in urls.items():
        goto(s, u, status=404)
        expect(for_eyes_absent(s), f"the 404 for the {name} page shows team {c.bus.team}'s message")
        check_frame(s, f"404 ({name} page of another team)")
    c.pages.shoot(s.page, "404 (another team)")
    csrf = s.page.locator('form#sign-out input[name="_csrf"]').get_attribute("value")
    r = api_post(s, revoke, {"_csrf": csrf}, c.bus.url)
    expect(r.status == 404, f"the scoped operator's revoke of {c.bus.team}'s bob answered {r.status}, not 404")
    expect(c.bus.agent("bob").call("GET", "/v1/me").status == 200, "bob was revoked by an operator of another team")
    open_team(s, other)
    visit(c, s, "team (operator of another team)")


def for_eyes_absent(s: Session) -> bool:
    return "for team local's eyes" not in s.page.content()


def sign_out_ends_session(c: Ctx) -> None:
    s = sign_in_with_code(c)
    cookie = check_session_cookie(s.ctx, "before sign-out")
    jar = f"{COOKIE}={cookie['value']}"
    before = harness.http("GET", c.url(CONSOLE), headers={"Cookie": jar})
    expect(before.status == 200, f"GET /console with the session cookie answered {before.status} before sign-out")
    post = submit(s.page, "form#sign-out")
    expect(post.status == 303, f"the sign-out form answered {post.status}, not 303")
    expect(path_of(s.page.url) == CONSOLE + "/sign-in", f"after sign-out the browser is at {s.page.url}")
    visit(c, s, "signed out", signed_in=False)
    after = harness.http("GET", c.url(CONSOLE), headers={"Cookie": jar})
    expect(after.status == 303, f"the old cookie still opens /console after sign-out ({after.status})")
    replay = c.session()
    replay.ctx.add_cookies([{k: cookie[k] for k in ("name", "value", "domain", "path", "httpOnly", "sameSite", "secure", "expires")}])
    goto(replay, c.url(CONSOLE))
    expect(path_of(replay.page.url) == CONSOLE + "/sign-in", f"a browser holding the old cookie opened {replay.page.url}")


def every_page(c: Ctx) -> None:
    alice = c.bus.agent("alice")
    run = alice.ok("POST", "/v1/runs")["id"]
    conv = alice.create_conversation(["bob"], "every page")
    msg = alice.send(conv, "a message with a run", run=run)
    pattern = f"<b>{rand('lease')}</b>/**"
    lease = alice.ok("POST", "/v1/leases", {"pattern": pattern, "run": run, "ttl_ms": 600_000})
    expect(lease["granted"] is True, f"alice's lease was not granted: {lease}")
    line = f"<i>{rand('status')}</i> reviewing the plan"
    alice.ok("PUT", "/v1/me/status", {"status": line})
    s = sign_in_with_code(c)
    visit(c, s, "overview")
    team = open_team(s, c.bus.team)
    # Alice's status line is text in her row, beside a link to her current run.
    alice_row = s.page.locator('table#agents tbody tr[data-agent="alice"]')
    doing = alice_row.locator('td[data-field="doing"]')
    expect(doing.inner_text() == line, f"alice's status line reads {doing.inner_text()!r}, not {line!r}")
    expect(s.page.locator("table#agents i").count() == 0, "a status line became markup")
    run_link = alice_row.locator('td[data-field="run"] a')
    expect(run_link.count() == 1 and run in (run_link.get_attribute("href") or ""), "alice's row does not link her current run")
    # A new line shows up live, without a reload.
    newer = f"{rand('status')} now merging"
    alice.ok("PUT", "/v1/me/status", {"status": newer})
    wait_until(lambda: doing.inner_text() == newer, 10, "alice's new status line on the open team page", page=s.page)
    # The lease is listed with its holder, its pattern as text (never markup).
    row = s.page.locator("table#leases tbody tr", has_text=pattern)
    expect(row.count() == 1, f"the team page's table#leases has {row.count()} rows holding {pattern!r}")
    expect(row.locator('td[data-field="holder"]').inner_text() == "alice", "the lease's holder is not alice")
    expect(s.page.locator("table#leases b").count() == 0, "a lease pattern became markup")
    visit(c, s, "team")
    open_conversation(s, conv)
    expect(s.page.locator(message_li(msg["id"])).count() == 1, "the conversation page does not list the message")
    visit(c, s, "conversation")
    base = team_segment(team)
    goto(s, c.url(f"{base}/messages/{msg['id']}"))
    expect(s.page.locator("#body").inner_text() == "a message with a run", "the message page's #body is not the body")
    visit(c, s, "message")
    goto(s, team)
    runs = s.page.locator("a[href]").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    runs = [urllib.parse.urljoin(team, h) for h in runs if path_of(urllib.parse.urljoin(team, h)).endswith("/runs")]
    expect(runs, "the team page has no link to its runs")
    goto(s, runs[0])
    visit(c, s, "runs")
    link = s.page.locator(f'a[href*="{run}"]')
    expect(link.count() >= 1, f"the runs page has no link to run {run}")
    with s.page.expect_navigation():
        link.first.click()
    records = s.page.locator("ol#records > li")
    expect(records.count() >= 3, f"the run page lists {records.count()} records (admitted, the send, the lease: 3 at least)")
    expect(
        s.page.locator("ol#records > li", has_text="Took a lease").count() == 1,
        "the run page does not show the lease the run took",
    )
    visit(c, s, "run")
    goto(s, c.url(CONSOLE + "/push"))
    for sel in ("table#registrations", "table#parked"):
        expect(s.page.locator(sel).count() == 1, f"the push page has no {sel}")
    visit(c, s, "push")
    goto(s, c.url(CONSOLE + "/storage"))
    meters = s.page.locator("meter")
    expect(meters.count() >= 1, "the storage page has no meter")
    visit(c, s, "storage")
    goto(s, c.url(f"{base}/conversations/{uuid.uuid4()}"), status=404)
    check_frame(s, "404 (unknown conversation)")
    c.pages.shoot(s.page, "404")


def long_body_is_cut(c: Ctx) -> None:
    alice = c.bus.agent("alice")
    conv = alice.create_conversation(["bob"], "long")
    body = "".join(f"line {i:04d} of a long body\n" for i in range(300))  # 7500 bytes
    msg = alice.send(conv, body)
    s = sign_in_with_code(c)
    open_team(s, c.bus.team)
    open_conversation(s, conv)
    li = s.page.locator(message_li(msg["id"]))
    shown = li.locator(".body").text_content() or ""
    expect(len(shown.encode()) <= CUT_BYTES + 16, f"the conversation page shows {len(shown.encode())} bytes of a {len(body)}-byte body (cut at 2 KiB)")
    expect(body.startswith(shown.rstrip("…. \n")[:1000]), "the cut body is not the body's beginning")
    more = li.locator("a.show-all")
    expect(more.count() == 1, "the cut body has no a.show-all")
    visit(c, s, "conversation (long body cut)")
    with s.page.expect_navigation():
        more.click()
    expect(s.page.locator("#body").text_content() == body, "the message page's #body is not the whole body")
    visit(c, s, "message (whole long body)")


def operator_posts_as_human(c: Ctx) -> None:
    alice, bob = c.bus.agent("alice"), c.bus.agent("bob")
    conv = alice.create_conversation(["bob"], "with a human")
    s = sign_in_with_code(c)
    team = open_team(s, c.bus.team)
    open_conversation(s, conv)
    text = f"a word from the operator {uuid.uuid4().hex[:6]}"
    s.page.locator('form#post textarea[name="body"]').fill(text)
    post = submit(s.page, "form#post")
    expect(post.status in (200, 201, 303), f"form#post answered {post.status}")
    li = s.page.locator("ol#messages li.message", has_text=text)
    appears(li, RECEIPT_DEADLINE_S, "the operator's message on the conversation page")
    expect(li.first.locator("[data-kind=human]").count() + (1 if li.first.get_attribute("data-kind") == "human" else 0) >= 1, "the operator's message is not marked [data-kind=human]")
    for agent in (alice, bob):
        got = [d for d in agent.fetch() if d["body"] == text]
        expect(len(got) == 1, f"{agent.name} fetched the operator's message {len(got)} times")
    visit(c, s, "conversation (operator posted)")
    goto(s, team)
    humans = s.page.locator("table#agents tr[data-agent]").filter(has=s.page.locator("[data-field=status]", has_text="human"))
    expect(humans.count() == 1, f"the team page lists {humans.count()} human members")
    expect(humans.first.locator("form.revoke").count() == 0, "the human member has a revoke form")


def javascript_off(c: Ctx) -> None:
    alice = c.bus.agent("alice")
    conv = alice.create_conversation(["bob"], "no js")
    msg = alice.send(conv, "readable without JavaScript")
    s = sign_in_with_code(c, javascript=False)
    sec = s.page.locator(f'section[data-team="{c.bus.team}"]')
    expect(sec.locator("table.chart-data").count() >= 1, "with JavaScript off the overview has no table.chart-data")
    visit(c, s, "overview (JavaScript off)")
    open_team(s, c.bus.team)
    open_conversation(s, conv)
    li = s.page.locator(message_li(msg["id"]))
    expect(li.locator(".body").inner_text() == "readable without JavaScript", "with JavaScript off the message's body does not read")
    expect(s.page.locator(receipt(msg["id"], "bob")).count() == 1, "with JavaScript off bob's receipt is not shown")
    expect(not s.watch.eventsources, "an EventSource opened with JavaScript off")
    visit(c, s, "conversation (JavaScript off)")


@dataclasses.dataclass
class Check:
    title: str
    fn: Callable[[Ctx], None]
    not_on: dict[str, str] = dataclasses.field(default_factory=dict)
    """Stores on which the check cannot run, with the reason printed instead."""


CHECKS = [
    Check("the dev agents printed by serve send, fetch and confirm over HTTP (harness)", dev_agents_talk_over_http),
    Check("sign in with the printed one-time code", sign_in_with_printed_code),
    Check("the same code used twice is refused (401)", code_used_twice_is_refused),
    Check("sign in with an operator token (crewbus operator add; on memory serve --dev-operator-token-file)", sign_in_with_operator_token),
    Check("the overview shows the dev team local", overview_shows_dev_team),
    Check("a message sent over HTTP appears live within 2 s, no reload; its receipt turns confirmed", live_message_and_receipt),
    Check("hostile bodies run nothing: no dialog, no injected element, literal text, strict CSP", hostile_bodies_run_nothing),
    Check("bidirectional controls in a title and a body are shown, never obeyed: isolated, drawn in order", bidi_controls_are_shown_not_obeyed),
    Check("a POST without the CSRF token is refused (403)", post_without_csrf_refused),
    Check("revoking an agent from the console makes its next call 401", revoke_from_console_makes_next_call_401),
    Check("an operator of another team sees 404 on team local's pages", scoped_operator_sees_404, {"memory": NO_CLI_ON_MEMORY}),
    Check("sign-out ends the session (the old cookie no longer opens /console)", sign_out_ends_session),
    Check("every page: frame, CSP, axe-core, screenshot", every_page),
    Check("a long body is cut at 2 KiB with a link to all of it", long_body_is_cut),
    Check("an operator posts into a conversation as the team's human member", operator_posts_as_human),
    Check("JavaScript off: the pages read", javascript_off),
]
