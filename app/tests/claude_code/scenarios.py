"""The real-host scenarios: Claude Code 2.1.328 in print mode against the scripted model, with
crewbus's MCP endpoint and hooks. Each scenario gets a fresh `crewbus serve`, project, HOME and
model, and waits on each of its conditions with a 10 s deadline."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path
from typing import Callable

import harness as H
import model as M

ALLOW_CREWBUS = ["--allowedTools", "mcp__crewbus"]
"""Print mode asks nobody: a tool not allowed is denied. `mcp__crewbus` allows every tool of
the server named crewbus."""


@dataclasses.dataclass
class Ctx:
    crewbus: str
    claude: str
    root: Path
    artifacts: Path

    def dir(self, name: str) -> Path:
        return H.new_dir(self.root, name)

    def model(self, name: str) -> M.Model:
        return M.Model(record_path=str(self.artifacts / f"{name}.requests.jsonl"))


def main_requests(m: M.Model) -> list[dict]:
    return m.main_requests()


def tool_result_for(request: dict, tool_use_id: str) -> str | None:
    for b in H.tool_results(request):
        if b.get("tool_use_id") == tool_use_id:
            return H.tool_result_text(b)
    return None


def last_tool_use(request: dict, name: str) -> dict | None:
    """The newest tool_use block named `name` in the request's assistant messages."""
    for m in reversed(request["messages"]):
        if m.get("role") == "assistant" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_use" and b.get("name") == name:
                    return b
    return None


def start_crewbus(ctx: Ctx, work: Path) -> H.Crewbus:
    d = work / "crewbus"
    d.mkdir()
    return H.Crewbus(ctx.crewbus, d)


# --- smoke: the harness itself, with nothing new in crewbus --------------------------------------

SMOKE_REASON = "smoke check: the hook asks for one more turn (reason 7f3a)"

SMOKE_HOOK = """#!/bin/sh
# A hand-written Stop hook: records each event (one JSON line) and blocks once.
dir=$(dirname "$0")
cat >> "$dir/stop-events.jsonl"
echo >> "$dir/stop-events.jsonl"
if [ ! -e "$dir/blocked-once" ]; then
  : > "$dir/blocked-once"
  printf '%s\\n' '{"decision":"block","reason":"REASON"}'
fi
"""


def smoke(ctx: Ctx) -> None:
    """`.mcp.json` written by hand (HTTP, alice's token); the model calls
    `mcp__crewbus__whoami` and crewbus's answer (alice's name and id) reaches it in the next
    request; a hand-written Stop hook blocks once: the next request carries its reason, the
    session then ends, and the second Stop event has `stop_hook_active: true`."""
    work = ctx.dir("smoke")
    bus = start_crewbus(ctx, work)
    try:
        alice = bus.agent("alice")
        me = alice.me()
        project, home, hooks = work / "project", work / "home", work / "hooks"
        for d in (project, home, hooks, project / ".claude"):
            d.mkdir()
        (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"crewbus": {
            "type": "http", "url": bus.url + "/mcp", "headers": {"Authorization": f"Bearer {alice.token}"}}}}))
        hook = hooks / "stop.sh"
        hook.write_text(SMOKE_HOOK.replace("REASON", SMOKE_REASON))
        hook.chmod(0o755)
        (project / ".claude" / "settings.local.json").write_text(json.dumps(
            {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": shlex.quote(str(hook))}]}]}}))

        def script(req: dict) -> M.Turn:
            if H.stop_feedback(req):
                return M.text("The hook's reason is noted; done.")
            if last_tool_use(req, "mcp__crewbus__whoami"):
                return M.text("I am alice.")
            return M.call("mcp__crewbus__whoami")

        with ctx.model("smoke") as m:
            m.script = script
            host = H.Host(ctx.claude, project, home, m.url, "Who are you on the bus?", ALLOW_CREWBUS)
            result = host.result()
            reqs = main_requests(m)

        # Only the Messages API was called, and each main request listed crewbus's tools directly.
        paths = sorted({r["method"] + " " + r["path"] for r in m.requests})
        H.expect(paths == ["POST /v1/messages?beta=true"], f"Claude Code called more than the Messages API: {paths}")
        for r in reqs:
            names = {t["name"] for t in r["tools"]}
            H.expect("mcp__crewbus__whoami" in names, f"mcp__crewbus__whoami not among the tools: {sorted(names)[:40]}")
        H.expect(len(reqs) == 3, f"three model requests (tool call, answer, after the block), got {len(reqs)}")

        # crewbus's answer reached the model.
        call = last_tool_use(reqs[1], "mcp__crewbus__whoami")
        H.expect(call is not None, "the second request holds no whoami call")
        answer = tool_result_for(reqs[1], call["id"])
        H.expect(answer is not None, f"the second request holds no result for the whoami call: {reqs[1]['messages'][-1]}")
        H.expect("alice" in answer and me["id"] in answer, f"whoami's result lacks alice's name and id ({me['id']}): {answer[:500]}")

        # The Stop hook's reason is in the request after the first Stop, and only there.
        H.expect(not H.stop_feedback(reqs[1]), "the reason came before the hook blocked")
        fb = H.stop_feedback(reqs[2])
        H.expect(len(fb) == 1 and fb[0].endswith(": " + SMOKE_REASON), f"the third request lacks the reason: {fb}")

        events = [json.loads(line) for line in (hooks / "stop-events.jsonl").read_text().splitlines() if line.strip()]
        H.expect([e.get("hook_event_name") for e in events] == ["Stop", "Stop"], f"two Stop events: {events}")
        H.expect([e.get("stop_hook_active") for e in events] == [False, True], f"stop_hook_active false then true: {events}")
        H.expect(all(e.get("session_id") == result["session_id"] for e in events), "the events carry the session id")
        summaries = H.stop_events(host.transcript(result["session_id"]))
        H.expect(len(summaries) == 2, f"the transcript has two stop_hook_summary entries: {summaries}")
        H.expect(result["num_turns"] >= 3, f"num_turns: {result['num_turns']}")
    finally:
        bus.stop()


SCENARIOS: list[tuple[str, Callable[[Ctx], None]]] = [
    ("smoke: whoami through Claude Code, a hand-written Stop hook blocks once", smoke),
]
