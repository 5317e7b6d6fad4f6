#!/usr/bin/env python3
"""A stand-in for the crewbus binary that implements the console's page contract (and the few
agent API routes the checks call), so the console checks can be run before the console exists:
`CREWBUS_BIN=app/tests/browser/fake_crewbus.py run.py --store sqlite`. It proves the checks can
pass and that their selectors, waits and requests are right; it is not the console and says
nothing about it. Standard library only.

    fake_crewbus.py --json serve --listen 127.0.0.1:0 [--ephemeral] [--dev-team T --dev-agent A…]
    fake_crewbus.py [--json] migrate | operator add NAME [--team T]… | team add NAME

Every store is one in-memory state in the serve process; `operator add` and `team add` beside
it append to `$XDG_DATA_HOME/crewbus-fake/cli.jsonl`, which the server reads on each request.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import queue
import re
import secrets
import sys
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
CUT = 2048
# Faults to prove the checks fail when the console is wrong (comma-separated names; see BUG_NAMES).
BUGS = set(filter(None, os.environ.get("FAKE_CONSOLE_BUG", "").split(",")))
BUG_NAMES = {
    "xss-live": "live messages carry the raw body as markup",
    "xss-rendered": "the conversation page renders bodies as markup",
    "csp-unsafe": "script-src allows 'unsafe-inline'",
    "no-csrf": "POSTs are accepted without _csrf",
    "code-reuse": "a sign-in code works more than once",
    "no-live": "no live message events",
    "no-receipt-live": "no live receipt events",
    "reload": "the page reloads itself on a live event",
    "revoke-lazy": "a revoked agent's token keeps working",
    "scope-leak": "a scoped operator sees every team",
    "signout-noop": "sign-out keeps the server-side session",
    "inline-style": "pages carry a style attribute (blocked by the CSP)",
    "axe": "the overview has an image without alt text",
    "bidi-raw": "titles and bodies are neither isolated nor have their bidirectional controls shown",
}


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.environ.get("HOME", "/tmp"), ".local/share")
    d = Path(base) / "crewbus-fake"
    d.mkdir(parents=True, exist_ok=True)
    return d


def now() -> datetime:
    return datetime.now(timezone.utc)


# --- CLI beside the server --------------------------------------------------------------------


def cli(args: list[str]) -> int:
    log = data_dir() / "cli.jsonl"
    if args[:1] == ["migrate"]:
        print(json.dumps({"applied": []}))
        return 0
    if args[:2] == ["team", "add"]:
        rec = {"op": "team", "name": args[2], "id": str(uuid.uuid4())}
        with open(log, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps({"id": rec["id"], "name": rec["name"]}))
        return 0
    if args[:2] == ["operator", "add"]:
        name, teams, rest = args[2], [], args[3:]
        while rest:
            if rest[0] == "--team":
                teams.append(rest[1])
                rest = rest[2:]
            else:
                rest = rest[1:]
        token = "cbo_" + secrets.token_hex(32)
        with open(log, "a") as f:
            f.write(json.dumps({"op": "operator", "name": name, "teams": teams, "hash": sha(token)}) + "\n")
        print(json.dumps({"name": name, "teams": teams, "token": token}))
        return 0
    print(f"fake crewbus: unknown command {args}", file=sys.stderr)
    return 2


# --- state -------------------------------------------------------------------------------------


class State:
    def __init__(self, team: str, agents: list[str]) -> None:
        self.lock = threading.RLock()
        self.teams: dict[str, dict] = {}
        self.agents: dict[str, dict] = {}  # id -> {id, team, name, kind, token, revoked}
        self.convs: dict[str, dict] = {}
        self.msgs: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.operators: dict[str, dict] = {}  # hash -> {name, teams (None = all)}
        self.codes: dict[str, dict] = {}
        self.sessions: dict[str, dict] = {}
        self.subs: list[queue.Queue] = []
        self.cli_seen = 0
        t = self.add_team(team)
        self.dev_tokens = {}
        for a in agents:
            self.dev_tokens[a] = self.add_agent(t, a)["token"]
        self.operators["dev"] = {"name": "dev", "teams": None}

    def add_team(self, name: str, tid: str | None = None) -> dict:
        t = {"id": tid or str(uuid.uuid4()), "name": name}
        self.teams[name] = t
        return t

    def add_agent(self, team: dict, name: str, kind: str = "agent") -> dict:
        a = {"id": str(uuid.uuid4()), "team": team["name"], "name": name, "kind": kind, "token": "cbt_" + secrets.token_hex(32), "revoked": False, "last": None}
        self.agents[a["id"]] = a
        return a

    def sync_cli(self) -> None:
        log = data_dir() / "cli.jsonl"
        if not log.exists():
            return
        lines = log.read_text().splitlines()
        for line in lines[self.cli_seen :]:
            r = json.loads(line)
            if r["op"] == "team":
                self.add_team(r["name"], r["id"])
            else:
                self.operators[r["hash"]] = {"name": r["name"], "teams": r["teams"] or None}
        self.cli_seen = len(lines)

    def agent_by_token(self, token: str) -> dict | None:
        for a in self.agents.values():
            if a["token"] == token and (not a["revoked"] or "revoke-lazy" in BUGS) and a["kind"] == "agent":
                return a
        return None

    def agent_named(self, team: str, name: str) -> dict | None:
        return next((a for a in self.agents.values() if a["team"] == team and a["name"] == name), None)

    def publish(self, event: dict) -> None:
        if event["kind"] == "message" and "no-live" in BUGS or event["kind"] == "receipt" and "no-receipt-live" in BUGS:
            return
        for q in list(self.subs):
            q.put(event)


STATE: State


# --- HTML ----------------------------------------------------------------------------------------

e = html.escape
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """Text an agent wrote, escaped, its bidirectional controls shown as `[U+XXXX]` (the page
    contract; the `bidi-raw` fault leaves them acting)."""
    if "bidi-raw" in BUGS:
        return e(text)
    return e(BIDI.sub(lambda m: f"[U+{ord(m.group(0)):04X}]", text))


def isolated(text: str) -> str:
    """`shown(text)` in a `<bdi>` (no isolation under `bidi-raw`)."""
    return shown(text) if "bidi-raw" in BUGS else f"<bdi>{shown(text)}</bdi>"


def page(title: str, inner: str, session: dict | None) -> str:
    nav = ""
    if session:
        nav = (
            '<nav aria-label="Console"><a href="/console">Overview</a> <a href="/console/push">Push</a> '
            f'<a href="/console/storage">Storage</a> <form id="sign-out" method="post" action="/console/sign-out">{csrf(session)}'
            "<button type=\"submit\">Sign out</button></form></nav>"
        )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{shown(title)} · crewbus</title>'
        '<link rel="stylesheet" href="/console/static/console.css"><script src="/console/static/console.js" defer></script>'
        f"</head><body{body_attrs()}><header>{nav}</header><main><h1>{isolated(title)}</h1>{inner}</main></body></html>"
    )


def body_attrs() -> str:
    attrs = ' data-bug="reload"' if "reload" in BUGS else ""
    return attrs + (' style="margin:0"' if "inline-style" in BUGS else "")


def csrf(session: dict) -> str:
    return f'<input type="hidden" name="_csrf" value="{sha("csrf:" + session["secret"])}">'


def message_li(m: dict, team: str, raw: bool = False) -> str:
    body = m["body"]
    cut = body.encode()[:CUT].decode(errors="ignore")
    esc = (lambda x: x) if raw else shown
    more = f' <a class="show-all" href="/console/teams/{e(team)}/messages/{m["id"]}">Show all</a>' if len(cut) < len(body) else ""
    sender = STATE.agents[m["sender"]]
    dir_auto = "" if "bidi-raw" in BUGS else ' dir="auto"'
    kind = ' data-kind="human"' if sender["kind"] == "human" else ""
    receipts = "".join(
        f'<li class="receipt" data-recipient="{e(STATE.agents[r]["name"])}" data-state="{st}">{e(STATE.agents[r]["name"])}: {st}</li>'
        for r, st in m["receipts"].items()
    )
    return (
        f'<li class="message" data-seq="{m["seq"]}" data-message="{m["id"]}"><span class="sender"{kind}>{e(sender["name"])}</span> '
        f'<span class="body"{dir_auto}>{esc(cut)}</span>{more}<ul class="receipts">{receipts}</ul></li>'
    )


# --- server ---------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    # plumbing
    def send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8", headers: dict | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", CSP.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'") if "csp-unsafe" in BUGS else CSP)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def redirect(self, to: str, headers: dict | None = None) -> None:
        self.send(303, "", "text/plain", {"Location": to, **(headers or {})})

    def json(self, status: int, obj: object) -> None:
        self.send(status, json.dumps(obj), "application/json")

    def body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def session(self) -> dict | None:
        for part in (self.headers.get("Cookie") or "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == "crewbus_session":
                s = STATE.sessions.get(sha(v))
                if s and not s["ended"]:
                    return s
        return None

    def sees(self, s: dict, team: str) -> bool:
        return team in STATE.teams and (s["teams"] is None or team in s["teams"] or "scope-leak" in BUGS)

    # routes
    def do_GET(self) -> None:  # noqa: N802
        with STATE.lock:
            STATE.sync_cli()
        url = urllib.parse.urlsplit(self.path)
        p = url.path.rstrip("/") or "/"
        q = urllib.parse.parse_qs(url.query)
        if p == "/health":
            return self.json(200, {"status": "ok"})
        if p.startswith("/v1/"):
            return self.api("GET", p, {})
        if p == "/console/static/console.css":
            return self.send(200, CSS, "text/css")
        if p == "/console/static/console.js":
            return self.send(200, JS, "text/javascript")
        if p == "/console/sign-in":
            code = q.get("code", [""])[0]
            return self.send(200, page("Sign in", sign_in_form(code), None))
        s = self.session()
        if not s:
            return self.redirect("/console/sign-in")
        if p == "/console/events":
            return self.events(q.get("conversation", [""])[0])
        parts = p.split("/")[1:]
        with STATE.lock:
            if p == "/console":
                return self.send(200, page("Overview", overview(s), s))
            if p == "/console/push":
                return self.send(200, page("Push", '<table id="registrations"><caption>Registrations</caption><tr><th>Run</th></tr></table><table id="parked"><caption>Parked</caption><tr><th>Reason</th></tr></table>', s))
            if p == "/console/storage":
                meters = "".join(f'<p><label>{e(t)} body backend <meter min="0" max="100" value="1">1%</meter></label></p>' for t in STATE.teams if self.sees(s, t))
                return self.send(200, page("Storage", meters, s))
            if len(parts) >= 3 and parts[:2] == ["console", "teams"]:
                team = parts[2]
                if not self.sees(s, team):
                    return self.send(404, page("Not found", "<p>No such page.</p>", s))
                return self.team_page(s, team, parts[3:])
        return self.send(404, page("Not found", "<p>No such page.</p>", s))

    def team_page(self, s: dict, team: str, rest: list[str]) -> None:
        if not rest:
            rows = ""
            for a in STATE.agents.values():
                if a["team"] != team:
                    continue
                status = "human" if a["kind"] == "human" else ("revoked" if a["revoked"] else "active")
                form = ""
                if status == "active":
                    form = f'<form class="revoke" method="post" action="/console/teams/{e(team)}/agents/{e(a["name"])}/revoke">{csrf(s)}<button type="submit">Revoke {e(a["name"])}</button></form>'
                rows += f'<tr data-agent="{e(a["name"])}"><td>{e(a["name"])}</td><td data-field="last-active">{a["last"] or "never"}</td><td data-field="pending">0</td><td data-field="oldest">-</td><td data-field="status">{status}</td><td>{form}</td></tr>'
            convs = "".join(f'<li><a data-conversation="{c["id"]}" href="/console/teams/{e(team)}/conversations/{c["id"]}">{isolated(c["title"])}</a></li>' for c in STATE.convs.values() if c["team"] == team)
            inner = f'<table id="agents"><caption>Agents</caption><tr><th>Name</th><th>Last active</th><th>Pending</th><th>Oldest</th><th>Status</th><th>Action</th></tr>{rows}</table><h2>Conversations</h2><ul id="conversations">{convs}</ul><p><a href="/console/teams/{e(team)}/runs">Runs</a></p>'
            return self.send(200, page(f"Team {team}", inner, s))
        if rest[0] == "conversations" and len(rest) == 2 and rest[1] in STATE.convs and STATE.convs[rest[1]]["team"] == team:
            c = STATE.convs[rest[1]]
            items = "".join(message_li(STATE.msgs[m], team, raw="xss-rendered" in BUGS) for m in c["msgs"])
            form = f'<form id="post" method="post" action="/console/teams/{e(team)}/conversations/{c["id"]}/messages">{csrf(s)}<label>Message <textarea name="body"></textarea></label><button type="submit">Post</button></form>'
            return self.send(200, page(f"Conversation {c['title']}", f'<ol id="messages" data-conversation="{c["id"]}">{items}</ol>{form}', s))
        if rest[0] == "messages" and len(rest) == 2 and rest[1] in STATE.msgs and STATE.msgs[rest[1]]["team"] == team:
            m = STATE.msgs[rest[1]]
            attr = "" if "bidi-raw" in BUGS else ' dir="auto"'
            return self.send(200, page("Message", f'<pre id="body"{attr}>{shown(m["body"])}</pre>', s))
        if rest == ["runs"]:
            links = "".join(f'<li><a href="/console/teams/{e(team)}/runs/{r["id"]}">{r["id"]}</a></li>' for r in STATE.runs.values() if r["team"] == team)
            return self.send(200, page("Runs", f"<ul>{links}</ul>", s))
        if rest[0] == "runs" and len(rest) == 2 and rest[1] in STATE.runs and STATE.runs[rest[1]]["team"] == team:
            recs = "".join(f"<li>{e(r)}</li>" for r in STATE.runs[rest[1]]["records"])
            return self.send(200, page("Run", f'<ol id="records">{recs}</ol>', s))
        return self.send(404, page("Not found", "<p>No such page.</p>", s))

    def events(self, conv: str) -> None:
        q: queue.Queue = queue.Queue()
        STATE.subs.append(q)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            self.wfile.write(b": open\n\n")
            self.wfile.flush()
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                try:
                    ev = q.get(timeout=1)
                except queue.Empty:
                    self.wfile.write(b": ping\n\n")
                    self.wfile.flush()
                    continue
                if ev.get("conversation") != conv:
                    continue
                self.wfile.write(f"event: {ev['kind']}\ndata: {json.dumps(ev)}\n\n".encode())
                self.wfile.flush()
        except OSError:
            pass
        finally:
            STATE.subs.remove(q)
            self.close_connection = True

    def do_POST(self) -> None:  # noqa: N802
        with STATE.lock:
            STATE.sync_cli()
        url = urllib.parse.urlsplit(self.path)
        p = url.path.rstrip("/")
        raw = self.body()
        if p.startswith("/v1/"):
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return self.json(400, {"code": "invalid"})
            return self.api("POST", p, body)
        form = {k: v[0] for k, v in urllib.parse.parse_qs(raw.decode(), keep_blank_values=True).items()}
        origin = self.headers.get("Origin")
        if origin and origin != f"http://{self.headers.get('Host')}":
            return self.send(403, page("Forbidden", "<p>Origin refused.</p>", None))
        with STATE.lock:
            if p == "/console/sign-in":
                return self.sign_in(form)
            s = self.session()
            if not s:
                return self.redirect("/console/sign-in")
            if form.get("_csrf") != sha("csrf:" + s["secret"]) and "no-csrf" not in BUGS:
                return self.send(403, page("Forbidden", '<p role="alert">The form is stale: reload the page.</p>', s))
            if p == "/console/sign-out":
                s["ended"] = "signout-noop" not in BUGS
                return self.redirect("/console/sign-in", {"Set-Cookie": "crewbus_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"})
            parts = p.split("/")[1:]
            if len(parts) >= 3 and parts[:2] == ["console", "teams"]:
                team = parts[2]
                if not self.sees(s, team):
                    return self.send(404, page("Not found", "<p>No such page.</p>", s))
                if len(parts) == 6 and parts[3] == "agents" and parts[5] == "revoke":
                    a = STATE.agent_named(team, parts[4])
                    if not a:
                        return self.send(404, page("Not found", "<p>No such agent.</p>", s))
                    a["revoked"] = True
                    return self.redirect(f"/console/teams/{team}")
                if len(parts) == 6 and parts[3] == "conversations" and parts[5] == "messages" and parts[4] in STATE.convs:
                    human = STATE.agent_named(team, f"{s['operator']} (human)") or STATE.add_agent(STATE.teams[team], f"{s['operator']} (human)", "human")
                    c = STATE.convs[parts[4]]
                    if human["id"] not in c["members"]:
                        c["members"].append(human["id"])
                    self.store_message(c, human, form.get("body", ""))
                    return self.redirect(f"/console/teams/{team}/conversations/{c['id']}")
            return self.send(404, page("Not found", "<p>No such page.</p>", s))

    def sign_in(self, form: dict) -> None:
        code, token = form.get("code", "").strip(), form.get("token", "").strip()
        op = None
        if code:
            c = STATE.codes.get(sha(code))
            if c and (not c["used"] or "code-reuse" in BUGS) and c["expires"] > now():
                c["used"] = True
                op = STATE.operators["dev"]
        elif token:
            op = STATE.operators.get(sha(token))
        if not op:
            return self.send(401, page("Sign in", '<p role="alert">That code or token does not sign in.</p>' + sign_in_form(""), None))
        secret = secrets.token_hex(32)
        STATE.sessions[sha(secret)] = {"secret": secret, "operator": op["name"], "teams": op["teams"], "ended": False}
        self.redirect("/console", {"Set-Cookie": f"crewbus_session={secret}; Path=/console; HttpOnly; SameSite=Strict"})

    def store_message(self, c: dict, sender: dict, text: str) -> dict:
        m = {"id": str(uuid.uuid4()), "conversation": c["id"], "team": c["team"], "seq": len(c["msgs"]) + 1, "sender": sender["id"], "body": text, "receipts": {}}
        for mid in c["members"]:
            if mid != sender["id"] and STATE.agents[mid]["kind"] == "agent":
                m["receipts"][mid] = "stored"
        STATE.msgs[m["id"]] = m
        c["msgs"].append(m["id"])
        STATE.publish({"kind": "message", "conversation": c["id"], "html": message_li(m, c["team"], raw="xss-live" in BUGS)})
        return m

    def api(self, method: str, p: str, body: dict) -> None:
        auth = self.headers.get("Authorization") or ""
        with STATE.lock:
            a = STATE.agent_by_token(auth.removeprefix("Bearer ").strip())
            if not a:
                return self.json(401, {"code": "unauthenticated"})
            a["last"] = now().isoformat(timespec="seconds")
            parts = p.split("/")[1:]
            if method == "GET" and p == "/v1/me":
                return self.json(200, {"id": a["id"], "name": a["name"]})
            if p == "/v1/runs":
                r = {"id": str(uuid.uuid4()), "team": a["team"], "records": ["1 RunAdmitted"]}
                STATE.runs[r["id"]] = r
                return self.json(201, {"id": r["id"]})
            if p == "/v1/conversations":
                members = [a["id"]] + [STATE.agent_named(a["team"], n)["id"] for n in body["members"]]
                c = {"id": str(uuid.uuid4()), "team": a["team"], "title": body["title"], "members": members, "msgs": []}
                STATE.convs[c["id"]] = c
                return self.json(201, {"id": c["id"]})
            if len(parts) == 4 and parts[1] == "conversations" and parts[3] == "messages":
                c = STATE.convs[parts[2]]
                m = self.store_message(c, a, body["body"])
                if body.get("run"):
                    STATE.runs[body["run"]]["records"].append(f"{len(STATE.runs[body['run']]['records']) + 1} MessageSent")
                return self.json(201, {"created": True, "message": {"id": m["id"], "seq": m["seq"]}})
            if p == "/v1/inbox/fetch":
                out = []
                for m in STATE.msgs.values():
                    if m["receipts"].get(a["id"]) == "stored":
                        m["receipts"][a["id"]] = "handed_out"
                        m.setdefault("deliveries", {})[a["id"]] = d = str(uuid.uuid4())
                        out.append({"delivery_id": d, "message": {"id": m["id"], "seq": m["seq"]}, "body": m["body"]})
                        self.receipt_event(m, a)
                return self.json(200, {"deliveries": out})
            if p == "/v1/inbox/confirm":
                res = []
                for d in body["deliveries"]:
                    m = next((m for m in STATE.msgs.values() if m.get("deliveries", {}).get(a["id"]) == d), None)
                    if m:
                        m["receipts"][a["id"]] = "confirmed"
                        self.receipt_event(m, a)
                    res.append({"delivery_id": d, "outcome": "confirmed" if m else "unknown"})
                return self.json(200, {"results": res})
        return self.json(404, {"code": "not_found"})

    def receipt_event(self, m: dict, a: dict) -> None:
        STATE.publish({"kind": "receipt", "conversation": m["conversation"], "message": m["id"], "recipient": a["name"], "state": m["receipts"][a["id"]]})


def sign_in_form(code: str) -> str:
    return (
        '<form id="sign-in" method="post" action="/console/sign-in">'
        f'<p><label>One-time code <input name="code" value="{e(code)}" autocomplete="off"></label></p>'
        '<p><label>or operator token <input name="token" type="password" autocomplete="off"></label></p>'
        '<button type="submit">Sign in</button></form>'
    )


def overview(s: dict) -> str:
    out = ""
    for t in STATE.teams:
        if s["teams"] is not None and t not in s["teams"] and "scope-leak" not in BUGS:
            continue
        pending = sum(1 for m in STATE.msgs.values() if m["team"] == t for st in m["receipts"].values() if st == "stored")
        out += (
            f'<section data-team="{e(t)}" aria-labelledby="t-{e(t)}"><h2 id="t-{e(t)}"><a href="/console/teams/{e(t)}">{e(t)}</a></h2>'
            + ('<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">' if "axe" in BUGS else "")
            + '<div class="chart"><canvas width="400" height="80" aria-label="messages per minute" role="img"></canvas></div>'
            '<table class="chart-data"><caption>Messages per minute</caption><tr><th>minute</th><th>sent</th></tr><tr><td>now</td><td>0</td></tr></table>'
            f'<p>Pending <span data-field="pending">{pending}</span>, oldest <span data-field="oldest">-</span>, parked <span data-field="parked">0</span></p></section>'
        )
    return out


CSS = "body{font-family:sans-serif;margin:0;color:#1b1b1b} header{background:#12355b;padding:.5rem 1rem} nav a{color:#fff;margin-right:1rem} nav form{display:inline} main{padding:1rem} .body{white-space:pre-wrap}"

JS = """
const list = document.getElementById('messages');
if (list) {
  const es = new EventSource('/console/events?conversation=' + encodeURIComponent(list.dataset.conversation));
  es.addEventListener('message', (ev) => {
    const d = JSON.parse(ev.data);
    const t = document.createElement('template');
    t.innerHTML = d.html;  // the server escaped every agent string in it
    list.appendChild(t.content.firstElementChild);
    if (document.body.dataset.bug === 'reload') location.reload();
  });
  es.addEventListener('receipt', (ev) => {
    const d = JSON.parse(ev.data);
    const li = document.querySelector(`li.message[data-message="${d.message}"] li.receipt[data-recipient="${CSS.escape(d.recipient)}"]`);
    if (li) { li.dataset.state = d.state; li.textContent = `${d.recipient}: ${d.state}`; }
  });
}
for (const c of document.querySelectorAll('.chart canvas')) {
  const g = c.getContext('2d'); g.fillStyle = '#12355b'; g.fillRect(0, 60, 400, 20);
}
"""


def serve(args: list[str], as_json: bool) -> int:
    global STATE
    team, agents = "local", []
    i = 0
    while i < len(args):
        if args[i] == "--dev-team":
            team = args[i + 1]
            i += 2
        elif args[i] == "--dev-agent":
            agents.append(args[i + 1])
            i += 2
        elif args[i] == "--listen":
            i += 2
        else:
            i += 1
    STATE = State(team, agents or ["alice", "bob"])
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    for name, tok in STATE.dev_tokens.items():
        print(json.dumps({"team": STATE.teams[team]["id"], "agent": str(uuid.uuid4()), "name": name, "token": tok}), flush=True)
    code = "-".join("".join(secrets.choice("0123456789ABCDEFGHJKMNPQRSTVWXYZ") for _ in range(4)) for _ in range(4))
    STATE.codes[sha(code)] = {"used": False, "expires": now() + timedelta(minutes=10)}
    print(json.dumps({"console_url": f"{base}/console/sign-in?code={code}", "operator": "dev", "sign_in_code": code, "expires_at": (now() + timedelta(minutes=10)).isoformat()}), flush=True)
    print(json.dumps({"listening": base, "mcp_url": base + "/mcp"}), flush=True)
    httpd.serve_forever()
    return 0


def main() -> int:
    args = sys.argv[1:]
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    if args[:1] == ["serve"]:
        return serve(args[1:], as_json)
    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
