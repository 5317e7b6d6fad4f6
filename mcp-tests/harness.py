"""Starts what the MCP tests run against, on loopback only, and stops it again.

- `memory_server(binary)`: `crewbus serve --dev-team T --dev-agent alice --dev-agent bob --json`
  on the memory store (`serve --ephemeral`), listening on a free port of 127.0.0.1.
- `postgres_jetstream_server(binary)`: a private nats-server (conformance/nats/server.conf,
  `NATS_SERVER_BIN`, default /usr/sbin/nats-server) on a free port, a fresh database on the
  server of `DATABASE_URL`, then `crewbus migrate`, `team add T --backend jetstream --inbox
  jetstream --provision`, `agent add` ×2 and `crewbus serve`.

Both are context managers yielding a `Crewbus` (base URL, the agents' tokens, the binary). A
missing binary, database or nats-server raises `HarnessError` naming it; nothing is skipped.
Every wait polls a condition with a deadline; no fixed sleeps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
AGENTS = ("alice", "bob")


class HarnessError(RuntimeError):
    """What the tests need could not be set up (the message names it)."""


@dataclasses.dataclass
class Crewbus:
    """A running crewbus server."""

    url: str
    """`http://127.0.0.1:PORT` (the MCP endpoint is `url + "/mcp"`)."""
    tokens: dict[str, str]
    """Bearer token by agent name (`alice`, `bob`)."""
    team: str
    """The team's name."""
    binary: str
    """The crewbus binary (for the stdio bridge `crewbus mcp --url`)."""
    store: str
    """`memory` or `postgres-jetstream`."""

    @property
    def mcp_url(self) -> str:
        return self.url + "/mcp"


def crewbus_binary() -> str:
    """`CREWBUS_BIN`, else target/debug/crewbus under `CARGO_TARGET_DIR` or the repo."""
    explicit = os.environ.get("CREWBUS_BIN")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    path = Path(explicit) if explicit else target / "debug" / "crewbus"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise HarnessError(f"no crewbus binary at {path} (cargo build -p crewbus, or set CREWBUS_BIN)")
    return str(path)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any CREWBUS_* variable (the server would read them as
    configuration), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREWBUS_")}
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    def next_json(self, deadline: float, what: str) -> dict:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HarnessError(f"crewbus printed no {what} in time")
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise HarnessError(f"crewbus exited (status {self._proc.wait()}) before printing {what}")
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)


def _log_tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


@contextlib.contextmanager
def _serve(args: list[str], workdir: Path, log: Path, agents_in_output: bool) -> Iterator[tuple[str, dict]]:
    """Runs `crewbus … serve --listen 127.0.0.1:0 --json …`; yields (url, {agent name: token})
    read from its JSON lines; kills it at exit (its log tail is printed on failure)."""
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            args,
            cwd=workdir,
            env=child_env({"XDG_DATA_HOME": str(workdir / "data"), "HOME": str(workdir)}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    ok = False
    try:
        lines = _Lines(proc)
        deadline = time.monotonic() + 60
        tokens: dict[str, str] = {}
        while True:
            obj = lines.next_json(deadline, "its listening line")
            if "listening" in obj:
                url = obj["listening"].rstrip("/")
                break
            if agents_in_output and "token" in obj:
                tokens[obj["name"]] = obj["token"]
        _wait_healthy(url, proc, deadline)
        yield url, tokens
        ok = True
    finally:
        proc.kill()
        proc.wait()
        if not ok:
            print(f"--- crewbus log tail ({log}) ---\n{_log_tail(log)}", flush=True)


def _wait_healthy(url: str, proc: subprocess.Popen, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None:
            raise HarnessError(f"crewbus exited (status {proc.returncode}) before it was healthy")
        if time.monotonic() > deadline:
            raise HarnessError("crewbus not healthy within 60 s")
        time.sleep(0.02)


@contextlib.contextmanager
def memory_server(binary: str) -> Iterator[Crewbus]:
    """crewbus on the memory store (`serve --ephemeral`) with a dev team `mcp` and agents alice
    and bob."""
    with tempfile.TemporaryDirectory(prefix="crewbus-mcp-mem-") as d:
        work = Path(d)
        args = [binary, "--json", "serve", "--ephemeral", "--listen", "127.0.0.1:0", "--dev-team", "mcp"]
        for a in AGENTS:
            args += ["--dev-agent", a]
        with _serve(args, work, work / "crewbus.log", agents_in_output=True) as (url, tokens):
            missing = [a for a in AGENTS if a not in tokens]
            if missing:
                raise HarnessError(f"crewbus serve --json printed no token for {missing}")
            yield Crewbus(url=url, tokens=tokens, team="mcp", binary=binary, store="memory")


# --- Postgres + JetStream ------------------------------------------------------------------------

NATS_PROVISIONER = ("provisioner", "provisioner-test-secret")
NATS_RUNTIME = ("runtime", "runtime-test-secret")


@contextlib.contextmanager
def nats_server(workdir: Path) -> Iterator[str]:
    """A private nats-server from conformance/nats/server.conf; yields its `nats://` URL."""
    binary = os.environ.get("NATS_SERVER_BIN", "/usr/sbin/nats-server")
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise HarnessError(f"no nats-server at {binary} (set NATS_SERVER_BIN)")
    template = (REPO / "conformance/nats/server.conf").read_text()
    store = workdir / "nats-store"
    port = free_port()
    conf = (
        template.replace("{{PORT}}", str(port))
        .replace("{{NAME}}", f"mcp-tests-{port}")
        .replace("{{MAX_PAYLOAD}}", "2MB")
        .replace("{{STORE}}", str(store))
        .replace("{{CLUSTER}}", "")
        .replace("{{ACCOUNT_JETSTREAM}}", "enabled")
    )
    conf_path, log = workdir / "nats.conf", workdir / "nats.log"
    conf_path.write_text(conf)
    proc = subprocess.Popen([binary, "-c", str(conf_path), "-l", str(log)], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while "Server is ready" not in _log_tail(log, 1 << 20):
            if proc.poll() is not None:
                raise HarnessError(f"nats-server exited ({proc.returncode}):\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                raise HarnessError(f"nats-server not ready within 30 s:\n{_log_tail(log)}")
            time.sleep(0.02)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


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
    """A new empty database on the server of `DATABASE_URL`, dropped at exit; yields its URL."""
    admin = os.environ.get("DATABASE_URL")
    if not admin:
        raise HarnessError("DATABASE_URL is not set (postgres://USER@127.0.0.1:PORT/DB)")
    parts = urllib.parse.urlsplit(admin)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise HarnessError("DATABASE_URL must name a loopback server")
    name = f"crewbus_mcp_{uuid.uuid4().hex[:12]}"
    psql = _psql()

    def sql(statement: str) -> None:
        r = subprocess.run(
            [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", admin, "-c", statement],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if r.returncode != 0:
            raise HarnessError(f"psql failed: {statement}: {r.stderr.strip()}")

    sql(f'CREATE DATABASE "{name}"')
    try:
        yield urllib.parse.urlunsplit(parts._replace(path="/" + name))
    finally:
        sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _config_toml(database_url: str, nats_url: str) -> str:
    (pu, pp), (ru, rp) = NATS_PROVISIONER, NATS_RUNTIME
    return f"""listen = "127.0.0.1:0"
[database]
url = "{database_url}"
max_connections = 8
migrate_on_start = true
[log]
level = "warn"
[nats]
servers = ["{nats_url}"]
replicas = 1
request_timeout_ms = 2000
[nats.runtime]
user = "{ru}"
password = "{rp}"
[nats.provisioning]
user = "{pu}"
password = "{pp}"
"""


def _operator(binary: str, config: Path, workdir: Path, *args: str) -> dict:
    r = subprocess.run(
        [binary, "--config", str(config), "--json", *args],
        cwd=workdir,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode != 0:
        raise HarnessError(f"crewbus {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


@contextlib.contextmanager
def postgres_jetstream_server(binary: str) -> Iterator[Crewbus]:
    """crewbus on a fresh Postgres database with a JetStream team `mcp` (bodies and inbox in
    JetStream, provisioned) and agents alice and bob."""
    with tempfile.TemporaryDirectory(prefix="crewbus-mcp-pgjs-") as d:
        work = Path(d)
        with nats_server(work) as nats_url, fresh_database() as db_url:
            config = work / "crewbus.toml"
            config.write_text(_config_toml(db_url, nats_url))
            _operator(binary, config, work, "migrate")
            team = _operator(
                binary, config, work, "team", "add", "mcp", "--backend", "jetstream", "--inbox", "jetstream", "--provision"
            )
            if team.get("inbox") != "jetstream" or team.get("body_backend") != "jetstream":
                raise HarnessError(f"team add did not move the team to JetStream: {team}")
            tokens = {a: _operator(binary, config, work, "agent", "add", "--team", "mcp", a)["token"] for a in AGENTS}
            args = [binary, "--config", str(config), "--json", "serve", "--listen", "127.0.0.1:0"]
            with _serve(args, work, work / "crewbus.log", agents_in_output=False) as (url, _):
                yield Crewbus(url=url, tokens=tokens, team="mcp", binary=binary, store="postgres-jetstream")


def server(store: str, binary: str) -> contextlib.AbstractContextManager[Crewbus]:
    """`memory` or `postgres-jetstream`."""
    if store == "memory":
        return memory_server(binary)
    if store == "postgres-jetstream":
        return postgres_jetstream_server(binary)
    raise HarnessError(f"unknown store {store!r} (memory, postgres-jetstream)")
