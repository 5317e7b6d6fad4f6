"""What the browser tests run against, on loopback only, and the helpers they share.

- `server(store, binary)`: one `crewbus --json serve --listen 127.0.0.1:0` in its own temp
  directory (its own `HOME` and `XDG_DATA_HOME`, no `CREWBUS_*` variable but the store's), on
  - `sqlite`: the embedded store (no configuration: the dev team `local` with alice and bob);
  - `memory`: `serve --ephemeral`;
  - `postgres`: a fresh database on the server of `DATABASE_URL` (`crewbus migrate` first,
    then `serve --dev-team local --dev-agent alice --dev-agent bob`), dropped at exit.
  It reads the dev agents' tokens and the console line (`console_url`, `sign_in_code`) from
  the `--json` lines, then waits for `/health`, everything against one deadline. The yielded
  `Crewbus` runs CLI commands beside the server (`operator add`, `team add`) with the server's
  own environment, and talks to the agent API as alice or bob.
- `Browser`: Debian's chromium (`/usr/bin/chromium`, never a downloaded browser) driven by
  Playwright, headless, in a fresh profile; `Browser.context()` hands out isolated contexts
  with every page watched (`Watch`: dialogs, page errors, CSP violations, requests that left
  loopback, failed sub-resources).
- `Pages`: per test, the screenshot of every page (full page PNG into the artifacts directory)
  and an axe-core run on it (in a `bypass_csp=True` context that carries the same session
  cookie, since axe is injected with `add_script_tag` and the console's CSP forbids that);
  any `serious` or `critical` violation fails the test.
- `wait_until(cond, timeout, what)`: polls a condition against a deadline (no fixed sleeps
  anywhere in the tests).

Nothing is skipped silently: a missing binary, browser, axe-core, database or server line raises
`HarnessError` (or `Failure` in a test) naming it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from playwright.sync_api import BrowserContext, Page, Playwright, Response, sync_playwright

REPO = Path(__file__).resolve().parents[3]
T = TypeVar("T")

CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
# Headless, no sandbox (root), and none of chromium's own traffic (the network is closed: without
# these it retries its background services for ever). The proxy pointing at a closed loopback
# port catches anything that would leave loopback anyway (chromium bypasses a proxy for
# loopback by itself); `Watch` also fails a test on any such request.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--proxy-server=http://127.0.0.1:9",
]
AXE_DIR = Path(os.environ.get("AXE_DIR") or REPO / ".tools/browser-node/node_modules/axe-core")
ARTIFACTS = Path(os.environ.get("BROWSER_ARTIFACTS") or REPO / "target/console-screenshots")
# Deadlines (seconds).
START_DEADLINE_S = 60
# After the listening line, how long to wait for a console line still to come (it is printed
# before it; this only bounds a server that prints none).
CONSOLE_LINE_GRACE_S = 3
HTTP_TIMEOUT_S = 15
# How long an agent's fetch waits for a delivery (milliseconds).
FETCH_WAIT_MS = 5000

DEV_TEAM = "local"
AGENTS = ("alice", "bob")


class HarnessError(RuntimeError):
    """What the tests need could not be set up (the message names it)."""


class Failure(AssertionError):
    """A check of a test did not hold (the message says which and what was seen)."""


def expect(cond: Any, what: str) -> None:
    if not cond:
        raise Failure(what)


def wait_until(cond: Callable[[], T], timeout: float, what: str, interval: float = 0.02, page: Page | None = None) -> T:
    """Polls `cond` until it returns a truthy value (returned) or `timeout` seconds passed
    (`Failure` naming `what`, with the last exception `cond` raised, if any). With `page`, the
    pause between polls is Playwright's (`page.wait_for_timeout`), so the page's events (its
    responses, dialogs, navigations) are delivered to the listeners meanwhile; a bare
    `time.sleep` would hold them back."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = cond()
            if value:
                return value
        except Failure:
            raise
        except Exception as e:  # noqa: BLE001 - a condition that cannot be read yet is not met yet
            last = e
        if time.monotonic() >= deadline:
            raise Failure(f"{what}: not within {timeout:g} s" + (f" (last error: {last})" if last else ""))
        if page is not None:
            page.wait_for_timeout(interval * 1000)
        else:
            time.sleep(interval)


# --- crewbus -------------------------------------------------------------------------------------


def crewbus_binary() -> str:
    """`CREWBUS_BIN`, else target/debug/crewbus under `CARGO_TARGET_DIR` or the repo."""
    explicit = os.environ.get("CREWBUS_BIN")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    path = Path(explicit) if explicit else target / "debug" / "crewbus"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise HarnessError(f"no crewbus binary at {path} (cargo build -p crewbus --bin crewbus, or set CREWBUS_BIN)")
    return str(path)


@dataclasses.dataclass
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: Any
    """The JSON document, or the text when it is none."""


def http(method: str, url: str, *, token: str | None = None, body: Any = None, headers: dict[str, str] | None = None) -> HttpAnswer:
    """One request (no redirect followed); the answer whatever its status."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=HTTP_TIMEOUT_S) as r:
            status, hdrs, raw = r.status, dict(r.headers.items()), r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, dict(e.headers.items()), e.read()
    text = raw.decode(errors="replace")
    try:
        parsed: Any = json.loads(text) if text else None
    except ValueError:
        parsed = text
    return HttpAnswer(status, {k.lower(): v for k, v in hdrs.items()}, parsed)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401
        return None


@dataclasses.dataclass
class Agent:
    """An agent of the dev team, calling the agent API with its bearer token."""

    url: str
    name: str
    token: str

    def call(self, method: str, path: str, body: Any = None) -> HttpAnswer:
        return http(method, self.url + path, token=self.token, body=body)

    def ok(self, method: str, path: str, body: Any = None, want: tuple[int, ...] = (200, 201)) -> Any:
        a = self.call(method, path, body)
        if a.status not in want:
            raise Failure(f"{self.name}: {method} {path} answered {a.status}: {str(a.body)[:500]}")
        return a.body

    def create_conversation(self, members: list[str], title: str = "browser test") -> str:
        return self.ok("POST", "/v1/conversations", {"title": title, "members": members})["id"]

    def send(self, conversation: str, body: str, run: str | None = None) -> dict:
        """Sends `body`; returns the stored message's view (`id`, `seq`, …)."""
        req: dict[str, Any] = {"request_id": str(uuid.uuid4()), "body": body}
        if run:
            req["run"] = run
        sent = self.ok("POST", f"/v1/conversations/{conversation}/messages", req)
        return sent["message"]

    def fetch(self, limit: int = 100, wait_ms: int = FETCH_WAIT_MS) -> list[dict]:
        """The agent's next deliveries: a waiting fetch (the server answers as soon as one can be
        handed out, at most `wait_ms` later: a message is fetchable only once the relay has
        marked its inbox reference, which on Postgres comes a moment after the send's 201)."""
        return self.ok("POST", "/v1/inbox/fetch", {"limit": limit, "wait_ms": wait_ms})["deliveries"]

    def confirm(self, deliveries: list[str]) -> list[dict]:
        return self.ok("POST", "/v1/inbox/confirm", {"deliveries": deliveries})["results"]


@dataclasses.dataclass
class Crewbus:
    """A running `crewbus serve`."""

    url: str
    """`http://127.0.0.1:PORT`."""
    store: str
    """`sqlite`, `memory` or `postgres`."""
    binary: str
    workdir: Path
    env: dict[str, str]
    """The server's environment (CLI commands beside it run with the same)."""
    tokens: dict[str, str]
    """Bearer token by dev agent name."""
    console: dict | None
    """The console line of `serve --json` (`console_url`, `operator`, `sign_in_code`,
    `expires_at`), None when it printed none."""
    proc: subprocess.Popen
    log: Path
    dev_operator_token: str | None = None
    """On the memory store (where no `operator add` reaches the server): the token of the
    every-team operator `serve --dev-operator-token-file` keeps; None elsewhere."""

    @property
    def beside(self) -> bool:
        """Whether CLI commands can reach this server's store (not on the memory store)."""
        return self.store != "memory"

    @property
    def team(self) -> str:
        return DEV_TEAM

    def agent(self, name: str) -> Agent:
        return Agent(self.url, name, self.tokens[name])

    @property
    def console_url(self) -> str:
        if not self.console or not self.console.get("console_url"):
            raise Failure(
                "crewbus serve --json printed no console line "
                '({"console_url": …, "operator": "dev", "sign_in_code": …, "expires_at": …})'
            )
        return self.console["console_url"]

    @property
    def sign_in_code(self) -> str:
        self.console_url  # noqa: B018 - raises the same Failure when there is no line
        code = self.console.get("sign_in_code") if self.console else None
        expect(code, f"the console line has no sign_in_code: {self.console}")
        return code

    def cli(self, *args: str) -> dict:
        """`crewbus --json ARGS` beside the server (same environment, same working directory);
        the last JSON line it printed."""
        if not self.beside:
            raise HarnessError(f"crewbus {' '.join(args)}: the {self.store} store has no CLI beside the server")
        r = subprocess.run(
            [self.binary, "--json", *args],
            cwd=self.workdir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if r.returncode != 0:
            raise Failure(f"crewbus {' '.join(args)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-1500:]}")
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        expect(lines, f"crewbus --json {' '.join(args)} printed no JSON line: {r.stdout[-500:]!r}")
        return json.loads(lines[-1])

    def operator_token(self, name: str, *teams: str) -> str:
        """`crewbus operator add NAME [--team T]…`: the operator's `cbo_…` token."""
        args = ["operator", "add", name]
        for t in teams:
            args += ["--team", t]
        token = self.cli(*args).get("token")
        expect(isinstance(token, str) and re.fullmatch(r"cbo_[0-9a-f]{64}", token), f"operator add printed no cbo_ token: {token!r}")
        return token

    def log_tail(self, chars: int = 3000) -> str:
        return _tail(self.log, chars)

    def assert_alive(self) -> None:
        if self.proc.poll() is not None:
            raise Failure(f"crewbus serve exited ({self.proc.returncode}):\n{self.log_tail()}")


def _tail(path: Path, chars: int) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class _Lines:
    """Reads a child's stdout lines on a thread so they can be awaited with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._q: queue.Queue[str | None] = queue.Queue()
        self._proc = proc
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._q.put(line)
        self._q.put(None)

    def next_json(self, deadline: float) -> dict | None:
        """The next JSON line; None at the deadline or at the end of the output."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                self._q.put(None)
                return None
            line = line.strip()
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    continue


def _base_env(workdir: Path) -> dict[str, str]:
    """As scripts/lib/probes.sh: PATH, its own HOME and XDG_DATA_HOME, and no CREWBUS_* variable
    but those set here (the server reads them as configuration)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "XDG_DATA_HOME": str(workdir / "data"),
        "CREWBUS_LOG__LEVEL": "warn",
    }


def _psql() -> str:
    pg_bin = os.environ.get("PG_BIN_DIR")
    if pg_bin and os.access(os.path.join(pg_bin, "psql"), os.X_OK):
        return os.path.join(pg_bin, "psql")
    found = shutil.which("psql")
    if not found:
        raise HarnessError("no psql (install Debian's postgresql-client or set PG_BIN_DIR)")
    return found


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A new empty database on the server of `DATABASE_URL` (loopback only), dropped at exit."""
    admin = os.environ.get("DATABASE_URL")
    if not admin:
        raise HarnessError("DATABASE_URL is not set (postgres://USER@127.0.0.1:PORT/DB; scripts/browser-tests sets it)")
    parts = urllib.parse.urlsplit(admin)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise HarnessError("DATABASE_URL must name a loopback server")
    name = f"crewbus_browser_{uuid.uuid4().hex[:12]}"
    psql = _psql()

    def sql(statement: str) -> None:
        r = subprocess.run([psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", admin, "-c", statement], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise HarnessError(f"psql failed: {statement}: {r.stderr.strip()}")

    sql(f'CREATE DATABASE "{name}"')
    try:
        yield urllib.parse.urlunsplit(parts._replace(path="/" + name))
    finally:
        sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


STORES = ("sqlite", "memory", "postgres")


@contextlib.contextmanager
def server(store: str, binary: str) -> Iterator[Crewbus]:
    """A fresh `crewbus serve` on `store` with the dev team `local` (alice, bob); killed at exit,
    its log tail printed when the body raised."""
    if store not in STORES:
        raise HarnessError(f"unknown store {store!r} ({', '.join(STORES)})")
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"crewbus-browser-{store}-")))
        env = _base_env(work)
        args = [binary, "--json", "serve", "--listen", "127.0.0.1:0"]
        if store == "memory":
            args += ["--ephemeral", "--dev-operator-token-file", str(work / "operator.token")]
        elif store == "postgres":
            env["CREWBUS_DATABASE__URL"] = stack.enter_context(fresh_database())
            r = subprocess.run([binary, "migrate"], cwd=work, env=env, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise HarnessError(f"crewbus migrate failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
            args += ["--dev-team", DEV_TEAM] + [x for a in AGENTS for x in ("--dev-agent", a)]
        log = work / "serve.log"
        with open(log, "ab") as err:
            proc = subprocess.Popen(args, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        ok = False
        try:
            bus = _started(proc, log, store, binary, work, env)
            yield bus
            ok = True
        finally:
            proc.kill()
            proc.wait()
            if not ok:
                print(f"--- crewbus serve log tail ({store}) ---\n{_tail(log, 3000)}", flush=True)


def _started(proc: subprocess.Popen, log: Path, store: str, binary: str, work: Path, env: dict[str, str]) -> Crewbus:
    lines = _Lines(proc)
    deadline = time.monotonic() + START_DEADLINE_S
    tokens: dict[str, str] = {}
    console: dict | None = None
    url: str | None = None
    while url is None:
        obj = lines.next_json(deadline)
        if obj is None:
            if proc.poll() is not None:
                raise HarnessError(f"crewbus serve exited ({proc.returncode}) before its listening line:\n{_tail(log, 3000)}")
            raise HarnessError(f"crewbus serve printed no listening line within {START_DEADLINE_S} s")
        if "listening" in obj:
            url = obj["listening"].rstrip("/")
        elif "console_url" in obj:
            console = obj
        elif obj.get("token") and obj.get("name"):
            tokens[obj["name"]] = obj["token"]
    # The console line comes before the listening line in the contract; one printed later is
    # still taken (a bounded wait, only when none came).
    grace = min(deadline, time.monotonic() + CONSOLE_LINE_GRACE_S)
    while console is None:
        obj = lines.next_json(grace)
        if obj is None:
            break
        if "console_url" in obj:
            console = obj
    missing = [a for a in AGENTS if a not in tokens]
    if missing:
        raise HarnessError(f"crewbus serve --json printed no token for the dev agents {missing}")
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None:
            raise HarnessError(f"crewbus serve exited ({proc.returncode}) before it was healthy:\n{_tail(log, 3000)}")
        if time.monotonic() > deadline:
            raise HarnessError(f"crewbus serve not healthy within {START_DEADLINE_S} s")
        time.sleep(0.02)
    operator_token = None
    if store == "memory":
        operator_token = (work / "operator.token").read_text().strip()
        expect(re.fullmatch(r"cbo_[0-9a-f]{64}", operator_token) is not None, "serve --dev-operator-token-file kept no cbo_ token")
    return Crewbus(url=url, store=store, binary=binary, workdir=work, env=env, tokens=tokens, console=console, proc=proc, log=log, dev_operator_token=operator_token)


# --- the browser ---------------------------------------------------------------------------------

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}

# Installed in every document before its own scripts (through the DevTools protocol, so the
# page's CSP does not apply to it): records the CSP violations the document reports.
_WATCH_INIT = """
window.__crewbusCsp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__crewbusCsp.push(`${e.effectiveDirective} blocked ${e.blockedURI || 'inline'} (${e.sourceFile || ''}:${e.lineNumber || 0})`);
});
"""


def _is_favicon(url: str) -> bool:
    return urllib.parse.urlsplit(url).path == "/favicon.ico"


class Watch:
    """What happened in one page: dialogs (recorded, then accepted), uncaught page errors,
    requests that left loopback, sub-resources that failed or answered >= 400, main-frame
    navigations and the last main-frame document response."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.offsite: list[str] = []
        self.bad_resources: list[str] = []
        self.navigations = 0
        self.document: Response | None = None
        self.eventsources: list[str] = []
        self.eventsource_open = False
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", self._request)
        page.on("requestfailed", self._failed)
        page.on("response", self._response)
        page.on("framenavigated", self._navigated)

    def _dialog(self, d: Any) -> None:
        self.dialogs.append(f"{d.type}: {d.message}")
        with contextlib.suppress(Exception):
            d.accept()

    def _request(self, req: Any) -> None:
        host = urllib.parse.urlsplit(req.url).hostname
        if req.url.startswith(("http:", "https:", "ws:", "wss:")) and host not in LOOPBACK_HOSTS:
            self.offsite.append(req.url)
        if req.resource_type == "eventsource":
            self.eventsources.append(req.url)

    def _failed(self, req: Any) -> None:
        # A live stream cut by a navigation or a closed page is not a broken page; nor is a
        # favicon the browser looks for by itself.
        if req.resource_type in ("eventsource", "document") or _is_favicon(req.url):
            return
        self.bad_resources.append(f"{req.url}: {req.failure}")

    def _response(self, resp: Response) -> None:
        req = resp.request
        if req.resource_type == "document" and req.frame == self.page.main_frame:
            self.document = resp
        elif req.resource_type == "eventsource":
            if resp.status == 200:
                self.eventsource_open = True
        elif resp.status >= 400 and not _is_favicon(resp.url):
            self.bad_resources.append(f"{resp.url}: HTTP {resp.status}")

    def _navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.navigations += 1

    def csp_violations(self) -> list[str]:
        try:
            return list(self.page.evaluate("window.__crewbusCsp || []"))
        except Exception:  # noqa: BLE001 - JavaScript off: the page reports nothing
            return []

    def assert_clean(self, where: str) -> None:
        """No dialog, page error, CSP violation, off-loopback request or broken sub-resource."""
        problems = []
        if self.dialogs:
            problems.append(f"dialogs fired: {self.dialogs}")
        if self.errors:
            problems.append(f"uncaught page errors: {self.errors}")
        csp = self.csp_violations()
        if csp:
            problems.append(f"CSP violations: {csp}")
        if self.offsite:
            problems.append(f"requests that left loopback: {self.offsite}")
        if self.bad_resources:
            problems.append(f"sub-resources that failed: {self.bad_resources}")
        expect(not problems, f"{where}: " + "; ".join(problems))


class Browser:
    """Chromium, launched once per run; isolated contexts per test."""

    def __init__(self) -> None:
        if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
            raise HarnessError(f"no chromium at {CHROMIUM} (apt-get install chromium, or set CHROMIUM_BIN)")
        self._pw: Playwright | None = None
        self.browser: Any = None

    def __enter__(self) -> "Browser":
        self._pw = sync_playwright().start()
        try:
            # Playwright starts the browser in a fresh temporary profile (user-data dir) of its
            # own, removed when the browser closes; `--user-data-dir` cannot be passed to it.
            self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        except Exception:
            self._pw.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            self.browser.close()
        if self._pw:
            self._pw.stop()

    @property
    def version(self) -> str:
        return self.browser.version

    def context(self, *, bypass_csp: bool = False, javascript: bool = True, storage_state: Any = None) -> BrowserContext:
        ctx = self.browser.new_context(
            bypass_csp=bypass_csp,
            java_script_enabled=javascript,
            storage_state=storage_state,
            viewport={"width": 1280, "height": 900},
            locale="en-US",
            timezone_id="UTC",
        )
        ctx.set_default_timeout(10_000)
        ctx.set_default_navigation_timeout(20_000)
        ctx.add_init_script(_WATCH_INIT)
        return ctx

    def page(self, ctx: BrowserContext) -> tuple[Page, Watch]:
        page = ctx.new_page()
        return page, Watch(page)


# --- axe-core and screenshots ------------------------------------------------------------------


def axe_script() -> Path:
    """axe.min.js of the pinned axe-core (its MPL-2.0 LICENSE must be beside it)."""
    js = AXE_DIR / "axe.min.js"
    if not js.is_file():
        raise HarnessError(f"no axe-core at {js} (scripts/lib/browser.sh installs it: npm ci into .tools/browser-node)")
    if not (AXE_DIR / "LICENSE").is_file():
        raise HarnessError(f"axe-core at {AXE_DIR} comes without its LICENSE (MPL-2.0): refusing to use it")
    return js


def axe_version() -> str:
    return json.loads((AXE_DIR / "package.json").read_text())["version"]


BLOCKING_IMPACTS = ("serious", "critical")


def run_axe(page: Page) -> dict:
    """Injects axe-core into `page` (which must be in a `bypass_csp=True` context) and runs it
    on the whole document; the raw results."""
    page.add_script_tag(path=str(axe_script()))
    return page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return {violations: r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                     nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 10)})),
                    passes: r.passes.length, url: r.url};
        }"""
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class Pages:
    """Per test: `shoot(page, name)` saves a full-page screenshot of what the user sees (the
    normal, CSP-enforcing context) and runs axe on the same URL in a `bypass_csp=True` context
    that carries the page context's cookies. Fails on any serious or critical violation."""

    def __init__(self, browser: Browser, store: str, test: str) -> None:
        self.browser = browser
        self.dir = ARTIFACTS / store
        self.dir.mkdir(parents=True, exist_ok=True)
        self.prefix = _slug(test)
        self.shots: list[Path] = []

    def shoot(self, page: Page, name: str, *, axe: bool = True) -> Path:
        path = self.dir / f"{self.prefix}--{_slug(name)}.png"
        page.screenshot(path=str(path), full_page=True)
        self.shots.append(path)
        if axe:
            self.axe(page, name)
        return path

    def axe(self, page: Page, name: str) -> None:
        """axe-core on the DOM `page` shows now: its serialized document is served again under
        the same URL (the first request only; styles, scripts and images come from the server
        as before, with the same cookies) in a `bypass_csp=True` context, so a page reached by
        a POST, a refusal or a live update is checked as the user sees it."""
        snapshot = page.content()
        url = page.url
        ctx = self.browser.context(bypass_csp=True, storage_state=page.context.storage_state())
        try:
            p = ctx.new_page()
            served = []

            def fulfill(route: Any) -> None:
                if served:
                    route.continue_()
                    return
                served.append(route.request.url)
                route.fulfill(status=200, content_type="text/html; charset=utf-8", body=snapshot)

            p.route(url, fulfill)
            p.goto(url, wait_until="load")
            p.unroute(url)
            result = run_axe(p)
        finally:
            ctx.close()
        (self.dir / f"{self.prefix}--{_slug(name)}.axe.json").write_text(json.dumps(result, indent=1))
        blocking = [v for v in result["violations"] if v.get("impact") in BLOCKING_IMPACTS]
        expect(
            not blocking,
            f"axe-core on {name} ({url}): {len(blocking)} serious/critical violation(s): "
            + "; ".join(f"{v['impact']} {v['id']} ({v['help']}) at {v['nodes'][:3]}" for v in blocking),
        )


# --- hostile bodies ------------------------------------------------------------------------------

HOSTILE_BODIES = (
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
)

# Every element's inline event handler attributes, every script that is neither a same-origin
# file under `prefix` nor a JSON data block, and every javascript: URL (read through the
# DevTools protocol: the page's CSP does not apply).
_INJECTED = """(prefix) => {
  const out = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      if (a.name.toLowerCase().startsWith('on')) out.push(`<${el.localName} ${a.name}=${a.value}>`);
    }
  }
  for (const s of document.scripts) {
    const src = s.getAttribute('src');
    const data = (s.type || '').toLowerCase() === 'application/json';
    if (src === null ? !data : !new URL(src, document.baseURI).pathname.startsWith(prefix)
        || new URL(src, document.baseURI).origin !== location.origin) {
      out.push(`<script src=${src}>${s.textContent.slice(0, 80)}`);
    }
  }
  for (const el of document.querySelectorAll('[href],[src],[action],[formaction]')) {
    for (const name of ['href', 'src', 'action', 'formaction']) {
      const v = el.getAttribute(name);
      if (v && v.replace(/\\s/g, '').toLowerCase().startsWith('javascript:')) out.push(`<${el.localName} ${name}=${v}>`);
    }
  }
  return out;
}"""


def hostile_findings(page: Page, watch: Watch, bodies: tuple[str, ...] | list[str], script_prefix: str, body_selector: str = ".body") -> list[str]:
    """What shows that a hostile body ran or became markup on `page`: a dialog, an
    `img[src=x]`, an inline event handler, a script that is not one of the site's files under
    `script_prefix`, a `javascript:` URL, or a body not shown literally as the text of one of
    the `body_selector` elements. Empty when everything is inert."""
    found = [f"dialog fired: {d}" for d in watch.dialogs]
    n = page.locator('img[src="x"]').count()
    if n:
        found.append(f"{n} injected img[src=x]")
    found += [f"injected: {x}" for x in page.evaluate(_INJECTED, script_prefix)]
    texts = page.locator(body_selector).all_text_contents()
    for b in bodies:
        if b not in texts:
            found.append(f"body {b!r} not shown literally (texts: {[t[:60] for t in texts][:8]})")
    return found


# --- small shared helpers -------------------------------------------------------------------------


def parse_csp(header: str) -> dict[str, list[str]]:
    """A Content-Security-Policy header as {directive: [source, …]}."""
    out: dict[str, list[str]] = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            out.setdefault(words[0].lower(), words[1:])
    return out

