"""What the real-host tests run: crewbus, the scripted model and Claude Code, on loopback only.

Everything runs inside the network namespace scripts/lib/claude-code.sh makes (`unshare --net`:
only `lo`, up); `check_isolated()` refuses to run anywhere else, so no test traffic can leave
loopback whatever Claude Code tries.

- `Crewbus`: one `crewbus --json serve --listen 127.0.0.1:0` on the embedded store in its own
  temporary data directory (the dev team `local` with alice and bob, their tokens read from the
  `--json` lines), waited for on `/health`; `stop()` ends it (SIGTERM, then SIGKILL).
- `Host`: Claude Code in print mode (`claude -p --output-format json PROMPT`) in a project
  directory, as a child process, with a temporary `HOME` and only the variables below.
- `wait_until(cond, timeout, what)`: polls a condition against a deadline (no fixed sleeps).

Claude Code's environment (nothing else of the caller's is passed on):
  ANTHROPIC_BASE_URL=http://127.0.0.1:PORT (the scripted model), ANTHROPIC_API_KEY (a dummy),
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (no telemetry, update or other side traffic),
  DISABLE_AUTOUPDATER=1, ENABLE_TOOL_SEARCH=false (MCP tools listed as `mcp__crewbus__*`
  instead of deferred behind tool search), HOME (a temporary directory: print mode needs nothing
  in it — it writes `.claude.json` and `.claude/` there; an HTTP MCP server's `headersHelper`
  would run only in a workspace whose trust is recorded in `.claude.json`, which is why
  `crewbus connect` writes the stdio bridge), PATH. Project `.mcp.json` servers and
  `.claude/settings*.json` hooks and permissions load in print mode without any approval.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

REPO = Path(__file__).resolve().parents[3]
T = TypeVar("T")

DEADLINE_S = 10.0
"""How long a scenario waits for any one condition (latency belongs to the bench)."""
START_DEADLINE_S = 60.0
HTTP_TIMEOUT_S = 15.0
SESSION_TIMEOUT_S = 90.0
"""A Claude Code session that outlives this is killed and the scenario fails."""


class HarnessError(RuntimeError):
    """What the tests need could not be set up (the message names it)."""


class Failure(AssertionError):
    """A check did not hold (the message says which and what was seen)."""


def expect(cond: Any, what: str) -> None:
    if not cond:
        raise Failure(what)


def wait_until(cond: Callable[[], T], timeout: float = DEADLINE_S, what: str = "condition", interval: float = 0.02) -> T:
    """Polls `cond` until it returns a truthy value (returned) or `timeout` seconds passed."""
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
            raise Failure(f"{what}: not within {timeout:g} s" + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


def check_isolated() -> None:
    """Refuses to run unless the only network interface is `lo` (the namespace of
    scripts/lib/claude-code.sh): Claude Code must have no route off this machine."""
    # /proc/self/net is the calling process's network namespace (/sys/class/net is the mount
    # namespace's view, which `unshare --net` alone does not change).
    with open("/proc/self/net/dev") as f:
        ifaces = sorted(line.split(":", 1)[0].strip() for line in f.readlines()[2:])
    if ifaces != ["lo"]:
        raise HarnessError(f"not in a loopback-only network namespace (interfaces: {ifaces}); run scripts/host-tests")


def binary(env_var: str, default: Path, what: str) -> str:
    path = Path(os.environ.get(env_var) or default)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise HarnessError(f"no {what} at {path} (set {env_var})")
    return str(path)


def crewbus_binary() -> str:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    return binary("CREWBUS_BIN", target / "debug" / "crewbus", "crewbus binary")


def claude_binary() -> str:
    default = REPO / ".tools/claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
    return binary("CLAUDE_BIN", default, "Claude Code binary (scripts/host-tests installs it)")


# --- HTTP ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class HttpAnswer:
    status: int
    body: Any


def http(method: str, url: str, token: str | None = None, body: Any = None, timeout: float = HTTP_TIMEOUT_S) -> HttpAnswer:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    text = raw.decode(errors="replace")
    try:
        return HttpAnswer(status, json.loads(text) if text else None)
    except ValueError:
        return HttpAnswer(status, text)


@dataclasses.dataclass
class Agent:
    url: str
    name: str
    token: str

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        a = http(method, self.url + path, self.token, body)
        if a.status not in (200, 201):
            raise Failure(f"{self.name}: {method} {path} answered {a.status}: {str(a.body)[:500]}")
        return a.body

    def me(self) -> dict:
        return self.ok("GET", "/v1/me")

    def conversation(self, title: str, members: list[str]) -> str:
        return self.ok("POST", "/v1/conversations", {"title": title, "members": members})["id"]

    def send(self, conversation: str, body: str) -> dict:
        return self.ok("POST", f"/v1/conversations/{conversation}/messages", {"request_id": str(uuid.uuid4()), "body": body})["message"]

    def receipts(self, message: str) -> list[dict]:
        return self.ok("GET", f"/v1/messages/{message}/receipts")


# --- crewbus -------------------------------------------------------------------------------------


class Crewbus:
    """A running `crewbus serve` on the embedded store, in `workdir` (its own HOME)."""

    def __init__(self, bin_path: str, workdir: Path, agents: tuple[str, ...] = ("alice", "bob")) -> None:
        self.binary = bin_path
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.operator_token_file = workdir / "operator.token"
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "CREWBUS_LOG__LEVEL": "warn"}
        self.log = workdir / "serve.log"
        args = [bin_path, "--json", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(self.data_dir),
                "--dev-operator-token-file", str(self.operator_token_file)]
        for a in agents:
            args += ["--dev-agent", a]
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(args, cwd=workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        self.tokens: dict[str, str] = {}
        self.url = ""
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + START_DEADLINE_S
        while not self.url:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                raise HarnessError(f"crewbus serve printed no listening line:\n{self.log_tail()}")
            if line.startswith("{"):
                doc = json.loads(line)
                if doc.get("token") and doc.get("name"):
                    self.tokens[doc["name"]] = doc["token"]
                if doc.get("listening"):
                    self.url = doc["listening"].rstrip("/")
        wait_until(lambda: http("GET", self.url + "/health", timeout=2).status == 200, START_DEADLINE_S, "crewbus /health")

    def agent(self, name: str) -> Agent:
        return Agent(self.url, name, self.tokens[name])

    def operator_token(self) -> str:
        return self.operator_token_file.read_text().strip()

    def add_agent(self, name: str) -> Agent:
        """A new agent of the dev team through the admin API (any name the API accepts)."""
        op = self.operator_token()
        teams = http("GET", self.url + "/v1/admin/teams", op).body
        team = next(t["id"] for t in teams if t["name"] == "local")
        a = http("POST", f"{self.url}/v1/admin/teams/{team}/agents", op, {"name": name})
        expect(a.status == 201, f"admin agent add answered {a.status}: {a.body}")
        self.tokens[name] = a.body["token"]
        return self.agent(name)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


# --- Claude Code ---------------------------------------------------------------------------------


def host_env(home: Path, model_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "sk-ant-test-dummy-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "ENABLE_TOOL_SEARCH": "false",
    }
    env.update(extra or {})
    return env


class Host:
    """One Claude Code print-mode session, started at construction.

    `args` come before the prompt (say `--allowedTools mcp__crewbus`). `result()` waits for the
    end and parses the JSON result; `transcript()` reads the session's JSON lines from HOME."""

    def __init__(self, claude: str, project: Path, home: Path, model_url: str, prompt: str, args: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.project = project
        self.home = home
        self.started = time.monotonic()
        self.ended: float | None = None
        self.proc = subprocess.Popen(
            [claude, "-p", "--output-format", "json", *(args or []), "--", prompt],
            cwd=project, env=host_env(home, model_url, env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._out: list[str] = []
        self._err: list[str] = []
        self._readers = [threading.Thread(target=self._pump, args=(s, b), daemon=True)
                         for s, b in ((self.proc.stdout, self._out), (self.proc.stderr, self._err))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _pump(stream: Any, buf: list[str]) -> None:
        buf.append(stream.read())

    def exited(self) -> bool:
        if self.proc.poll() is None:
            return False
        if self.ended is None:
            self.ended = time.monotonic()
        return True

    def wait(self, timeout: float = SESSION_TIMEOUT_S) -> float:
        """Waits for the session's end (killed and a `Failure` after `timeout`); the seconds it
        ran."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure(f"the Claude Code session did not end within {timeout:g} s")
        self.exited()
        for t in self._readers:
            t.join(timeout=5)
        assert self.ended is not None
        return self.ended - self.started

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def result(self) -> dict:
        self.wait()
        out, err = "".join(self._out), "".join(self._err)
        expect(self.proc.returncode == 0, f"claude exited {self.proc.returncode}: stdout {out[-1500:]!r} stderr {err[-1500:]!r}")
        try:
            doc = json.loads(out)
        except ValueError:
            raise Failure(f"claude printed no JSON result: {out[-1500:]!r} (stderr {err[-1500:]!r})") from None
        expect(doc.get("type") == "result" and doc.get("is_error") is False, f"claude's result is an error: {out[-2000:]}")
        return doc

    def transcript(self, session_id: str) -> list[dict]:
        files = list((self.home / ".claude" / "projects").glob(f"*/{session_id}.jsonl"))
        expect(len(files) == 1, f"no single transcript for session {session_id} under {self.home}/.claude/projects: {files}")
        return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


def stop_events(transcript: list[dict]) -> list[dict]:
    """The Stop hook runs of a session: Claude Code writes one `stop_hook_summary` system entry
    per Stop event into the transcript (`hookCount`, `hookErrors`: the blocking reasons)."""
    return [e for e in transcript if e.get("type") == "system" and e.get("subtype") == "stop_hook_summary"]


def new_dir(root: Path, name: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=name + "-", dir=root))
    return d


# --- the recorded requests -----------------------------------------------------------------------


def texts(message: dict) -> list[str]:
    """The text of one request message: its string content or its text blocks (tool results
    too: their string content or text blocks)."""
    c = message.get("content")
    if isinstance(c, str):
        return [c]
    out = []
    for b in c or []:
        if b.get("type") == "text":
            out.append(b["text"])
        elif b.get("type") == "tool_result":
            inner = b.get("content")
            if isinstance(inner, str):
                out.append(inner)
            else:
                out.extend(x.get("text", "") for x in inner or [] if x.get("type") == "text")
    return out


def tool_results(request: dict) -> list[dict]:
    """The tool_result blocks of a request's last message."""
    last = request["messages"][-1]
    c = last.get("content")
    return [b for b in c if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(c, list) else []


def tool_result_text(block: dict) -> str:
    inner = block.get("content")
    if isinstance(inner, str):
        return inner
    return "".join(x.get("text", "") for x in inner or [] if x.get("type") == "text")


STOP_FEEDBACK = "Stop hook blocking error from command: "


def stop_feedback(request: dict) -> list[str]:
    """The Stop hook feedback a request carries: Claude Code 2.1.328 sends each blocking reason
    as a system-role message `Stop hook blocking error from command: "<command>": <reason>`
    (the whole text after that prefix, the command included, is returned)."""
    return [t[len(STOP_FEEDBACK):] for m in request["messages"] if m.get("role") == "system"
            for t in texts(m) if t.startswith(STOP_FEEDBACK)]


def run(args: list[str], cwd: Path, env: dict[str, str], stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    """A short command, its output captured (a `Failure` past `timeout`)."""
    try:
        return subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(args[:4])}… did not end within {timeout:g} s") from None
