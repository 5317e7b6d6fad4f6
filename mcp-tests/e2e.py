"""End to end through crewbus's MCP server with the official Python MCP SDK (PyPI `mcp`, 2.x).

For each store (`memory`, `postgres-jetstream`: see harness.py) one crewbus server is started,
and against it, once per protocol mode — `legacy` (the initialize handshake: 2025-11-25) and
`2026-07-28` (stateless, per-request `_meta`) — with the negotiated revision asserted:

- over Streamable HTTP (`/mcp`, the agent's bearer in `Authorization`): two agents; bob waits in
  `fetch_inbox` (wait_seconds) and, once the server has started his call (its
  `crewbus_mcp_tool_calls_total` on /metrics moved), alice sends with `send_message`: the wait
  returns the message within a few seconds; the same `send_message` repeated with its `request_id` stores once; bob confirms
  (`confirm_deliveries`); an empty wait lasts as long as asked and hands out nothing more;
  `read_conversation` shows the message once; `get_conversation` of a random id is a tool result
  with `isError: true` and code `not_found`;
- through the stdio bridge (`crewbus mcp --url URL`, token in CREWBUS_MCP_TOKEN) driven by the
  SDK's stdio client: bob waits through the bridge while alice sends over HTTP;
- two agents coordinate with leases: alice holds `…/**`, bob's `acquire_lease` answers the
  conflict naming alice, bob waits (`wait_seconds`) and is granted soon after alice's
  `release_lease`; alice's old fencing token is then refused by `check_lease`, and bob's is
  greater (what a resource keeping the greatest token it accepted refuses by) — issue 21's
  two-agent scenario;
- the core tool profile, over HTTP (`/mcp?tools=core`) and through the bridge (`--tools core`):
  exactly its twelve tools, no `outputSchema`; a tool outside it is still callable;
- `tools/list` names every tool of the contract, each with an `outputSchema` whose root is an
  object, and every non-error tool result's `structuredContent` is validated against its tool's
  `outputSchema` with `jsonschema` (explicitly, besides the SDK's own check);
- `mode="auto"` (the SDK probes `server/discover`) settles on 2026-07-28;
- a request without a token, or with a wrong one, is HTTP 401 with `WWW-Authenticate: Bearer`.

Usage: `python e2e.py [--store memory|postgres-jetstream]...` (default: both). Needs the crewbus
binary (`CREWBUS_BIN` or target/debug/crewbus), and for postgres-jetstream `DATABASE_URL` and
nats-server (`NATS_SERVER_BIN`). Prints one line per check and ends with `N passed, N failed`;
the exit code is 1 when anything failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
import traceback
import uuid
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx2
import jsonschema
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_HANDSHAKE_VERSION

import harness

MODES = ("legacy", "2026-07-28")
EXPECTED_REVISION = {"legacy": LATEST_HANDSHAKE_VERSION, "2026-07-28": "2026-07-28"}

# The tools of the contract (issue 10), exact names.
TOOLS = {
    "whoami",
    "list_agents",
    "create_conversation",
    "list_conversations",
    "get_conversation",
    "send_message",
    "read_conversation",
    "fetch_inbox",
    "confirm_deliveries",
    "acknowledge_message",
    "get_receipts",
    "inbox_status",
    "start_run",
    "get_run",
    "resume_run",
    "seal_run",
    "read_run_records",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "list_leases",
    "check_lease",
    "set_status",
    "search_messages",
}

# The core tool profile (`/mcp?tools=core`, `crewbus mcp --tools core`), exact names.
CORE_TOOLS = {
    "whoami",
    "list_agents",
    "create_conversation",
    "send_message",
    "read_conversation",
    "fetch_inbox",
    "confirm_deliveries",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "list_leases",
    "check_lease",
}

# A wait must end this long after the message was sent at the latest (generous for CI; a wait
# that does not end on the send runs to its full wait_seconds, far above this).
WAKE_DEADLINE_S = 8.0
LONG_WAIT_S = 30


class Failure(AssertionError):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


class Agent:
    """One MCP client session of an agent, with the tools' output schemas from `tools/list`."""

    def __init__(self, name: str, client: Client, mode: str) -> None:
        self.name, self.client, self.mode = name, client, mode
        self.validators: dict[str, jsonschema.protocols.Validator] = {}

    async def list_tools(self) -> list[Any]:
        tools = (await self.client.list_tools()).tools
        for t in tools:
            schema = t.output_schema
            if schema is not None:
                cls = jsonschema.validators.validator_for(schema)
                cls.check_schema(schema)
                self.validators[t.name] = cls(schema)
        return tools

    async def call(self, tool: str, args: dict[str, Any], *, error: bool = False) -> Any:
        """Calls `tool`; returns its structuredContent (validated against the tool's
        outputSchema), or, with `error=True`, asserts an error result and returns it."""
        if not self.validators:
            await self.list_tools()
        result = await self.client.call_tool(tool, args)
        if error:
            expect(result.is_error, f"{tool} {args}: expected an error result, got {result.structured_content}")
            return result
        expect(not result.is_error, f"{tool}: unexpected error result: {_text(result)}")
        sc = result.structured_content
        expect(isinstance(sc, dict), f"{tool}: structuredContent is not an object: {sc!r}")
        validator = self.validators.get(tool)
        expect(validator is not None, f"{tool} has no outputSchema")
        errors = sorted(validator.iter_errors(sc), key=lambda e: list(e.path))
        expect(not errors, f"{tool}: structuredContent does not match its outputSchema: {errors[:1]}")
        expect(bool(result.content), f"{tool}: no text content")
        return sc


def _refs(schema: Any) -> Any:
    """Every `$ref` value in a schema."""
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(schema, list):
        for v in schema:
            yield from _refs(v)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def error_code(result: Any) -> str | None:
    """The bus error code of an error result: from structuredContent (`{"code"}` or
    `{"error": {"code"}}`), else from a JSON text content."""
    candidates = [result.structured_content]
    for c in result.content:
        with contextlib.suppress(ValueError, TypeError):
            candidates.append(json.loads(getattr(c, "text", "")))
    for v in candidates:
        if isinstance(v, dict):
            if isinstance(v.get("code"), str):
                return v["code"]
            if isinstance(v.get("error"), dict) and isinstance(v["error"].get("code"), str):
                return v["error"]["code"]
    return None


@contextlib.asynccontextmanager
async def http_agent(bus: harness.Crewbus, name: str, mode: str, url: str | None = None) -> AsyncIterator[Agent]:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {bus.tokens[name]}"},
        timeout=httpx2.Timeout(30.0, read=300.0),
    )
    async with http, Client(streamable_http_client(url or bus.mcp_url, http_client=http), mode=mode) as client:
        expect(
            client.protocol_version == EXPECTED_REVISION[mode],
            f"mode {mode}: negotiated {client.protocol_version}, expected {EXPECTED_REVISION[mode]}",
        )
        yield Agent(name, client, mode)


@contextlib.asynccontextmanager
async def stdio_agent(
    bus: harness.Crewbus, name: str, mode: str, errlog: Any, extra: tuple[str, ...] = ()
) -> AsyncIterator[Agent]:
    params = StdioServerParameters(
        command=bus.binary,
        args=["mcp", "--url", bus.url, *extra],
        env=harness.child_env({"CREWBUS_MCP_TOKEN": bus.tokens[name]}),
    )
    async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
        expect(
            client.protocol_version == EXPECTED_REVISION[mode],
            f"stdio mode {mode}: negotiated {client.protocol_version}, expected {EXPECTED_REVISION[mode]}",
        )
        yield Agent(name, client, mode)


TOOL_CALLS = "crewbus_mcp_tool_calls_total"


async def tool_calls(bus: harness.Crewbus) -> int:
    """The server's count of MCP tool calls so far (`/metrics`; counted as a call starts)."""
    async with httpx2.AsyncClient() as http:
        r = await http.get(bus.url + "/metrics")
    m = re.search(rf"^{TOOL_CALLS} (\d+)$", r.text, re.M)
    expect(r.status_code == 200 and m is not None, f"/metrics has no {TOOL_CALLS}")
    return int(m.group(1))


async def send_while_waiting(alice: Agent, bob: Agent, bus: harness.Crewbus, conv: str, body: str) -> tuple[dict, dict]:
    """bob waits in fetch_inbox; once the server has started his call (its tool-call counter
    moved), alice sends `body`; returns (the send's answer, bob's delivery of it)."""
    if not bob.validators:
        await bob.list_tools()
    before = await tool_calls(bus)
    started = time.monotonic()
    waiting = asyncio.create_task(bob.call("fetch_inbox", {"wait_seconds": LONG_WAIT_S, "limit": 10}))
    try:
        deadline = time.monotonic() + 10
        while await tool_calls(bus) <= before:
            expect(not waiting.done(), f"bob's fetch_inbox ended before the server counted it: {waiting}")
            expect(time.monotonic() < deadline, "the server did not start bob's fetch_inbox within 10 s")
            await asyncio.sleep(0.005)
        sent_at = time.monotonic()
        sent = await alice.call(
            "send_message", {"conversation_id": conv, "request_id": f"r-{uuid.uuid4()}", "body": body}
        )
        page = await asyncio.wait_for(waiting, WAKE_DEADLINE_S + LONG_WAIT_S)
    finally:
        waiting.cancel()
    woke = time.monotonic() - sent_at
    deliveries = page["deliveries"]
    expect(len(deliveries) == 1, f"the wait returned {len(deliveries)} deliveries, expected 1: {page}")
    d = deliveries[0]
    expect(d["message"]["id"] == sent["message"]["id"], "the wait returned another message")
    expect(d["body"] == body, "the delivered body differs from the sent one")
    expect(woke < WAKE_DEADLINE_S, f"the wait ended {woke:.2f} s after the send (more than {WAKE_DEADLINE_S} s)")
    print(f"    waited {time.monotonic() - started:.2f} s in all, {woke * 1000:.0f} ms after the send", flush=True)
    return sent, d


# --- the checks ------------------------------------------------------------------------------


async def check_tools_list(bus: harness.Crewbus, mode: str) -> None:
    async with http_agent(bus, "alice", mode) as alice:
        tools = await alice.list_tools()
        names = {t.name for t in tools}
        expect(TOOLS <= names, f"tools/list lacks {sorted(TOOLS - names)}")
        for t in tools:
            expect(t.output_schema is not None, f"{t.name} declares no outputSchema")
            expect(t.output_schema.get("type") == "object", f"{t.name}: outputSchema root is not an object")
            refs = list(_refs(t.output_schema))
            expect(
                all(r.startswith("#") and "components" not in r for r in refs),
                f"{t.name}: outputSchema is not self-contained ($ref {refs})",
            )
            expect(bool(t.description), f"{t.name} has no description")
        fetch_schema = next(t for t in tools if t.name == "fetch_inbox").input_schema
        expect("wait_seconds" in fetch_schema.get("properties", {}), "fetch_inbox takes no wait_seconds")
        send_schema = next(t for t in tools if t.name == "send_message").input_schema
        expect("request_id" in send_schema.get("required", []), "send_message does not require request_id")


async def check_exchange(bus: harness.Crewbus, mode: str) -> None:
    async with http_agent(bus, "alice", mode) as alice, http_agent(bus, "bob", mode) as bob:
        me = await alice.call("whoami", {})
        expect(me["name"] == "alice", f"whoami says {me['name']}")
        bob_me = await bob.call("whoami", {})
        agents = await alice.call("list_agents", {})
        expect({"alice", "bob"} <= {a["name"] for a in agents["agents"]}, f"list_agents: {agents}")
        status = f"reviewing the plan ({mode})"
        mine = await alice.call("set_status", {"status": status})
        expect(mine["status"] == status, f"set_status: {mine}")
        seen = await bob.call("list_agents", {})
        alice_seen = [a for a in seen["agents"] if a["name"] == "alice"]
        expect(alice_seen and alice_seen[0]["status"] == status, f"bob's list_agents: {seen}")

        conv = await alice.call("create_conversation", {"title": f"mcp e2e {mode}", "members": [bob_me["id"]]})
        conv_id = conv["id"]
        expect(bob_me["id"] in conv["members"], "bob is not a member")
        got = await bob.call("get_conversation", {"conversation_id": conv_id})
        expect(got["id"] == conv_id, "get_conversation answered another conversation")
        listed = await bob.call("list_conversations", {})
        expect(conv_id in {c["id"] for c in listed["conversations"]}, "list_conversations lacks it")

        body = f"hello bob over MCP ({mode})"
        sent, delivery = await send_while_waiting(alice, bob, bus, conv_id, body)
        message_id = sent["message"]["id"]
        expect(sent["created"] is True, "the first send_message was not created")

        # The same request_id again: the message is stored once.
        again = await alice.call(
            "send_message",
            {"conversation_id": conv_id, "request_id": sent["message"]["request_id"], "body": body},
        )
        expect(again["message"]["id"] == message_id, "a repeated request_id stored a second message")
        expect(again["created"] is False, "a repeated request_id says created")

        confirmed = await bob.call("confirm_deliveries", {"deliveries": [delivery["delivery_id"]]})
        expect(
            [r["outcome"] for r in confirmed["results"]] == ["confirmed"],
            f"confirm_deliveries: {confirmed}",
        )
        twice = await bob.call("confirm_deliveries", {"deliveries": [delivery["delivery_id"]]})
        expect([r["outcome"] for r in twice["results"]] == ["already_confirmed"], f"second confirm: {twice}")

        # An empty wait lasts as asked (1 s; at most 1 s more) and the repeated send delivered
        # nothing.
        t0 = time.monotonic()
        empty = await bob.call("fetch_inbox", {"wait_seconds": 1, "limit": 10})
        waited = time.monotonic() - t0
        expect(empty["deliveries"] == [], f"an empty inbox handed out {empty['deliveries']}")
        expect(0.95 <= waited <= 2.5, f"an empty 1 s wait lasted {waited:.2f} s")

        history = await bob.call("read_conversation", {"conversation_id": conv_id, "after_seq": 0, "limit": 50})
        items = history["messages"]
        expect([i["message"]["id"] for i in items] == [message_id], f"read_conversation: {items}")
        expect(items[0]["body"] == body, "read_conversation body differs")

        # The message is found by its words once the index worker has it (about 2 s).
        deadline = time.monotonic() + 20
        while True:
            found = await bob.call("search_messages", {"query": f"hello bob {mode}"})
            if found["hits"]:
                break
            expect(time.monotonic() < deadline, f"search_messages never found the message: {found}")
            await asyncio.sleep(0.1)
        expect(found["hits"][0]["message"] == message_id, f"search_messages: {found}")
        marked = [p["text"].lower() for p in found["hits"][0]["snippet"] if p["matched"]]
        expect("hello" in marked and "bob" in marked, f"search_messages marks no match: {found}")

        status = await bob.call("inbox_status", {})
        expect(isinstance(status, dict), "inbox_status")
        receipts = await alice.call("get_receipts", {"message_id": message_id})
        expect(bob_me["id"] in {r["recipient"] for r in receipts["receipts"]}, f"get_receipts: {receipts}")

        # Resources: bob's inbox and his conversation, as the SDK lists and reads them.
        resources = (await bob.client.list_resources()).resources
        uris = [str(r.uri) for r in resources]
        conv_uri = f"crewbus://conversations/{conv_id}"
        expect("crewbus://inbox" in uris and conv_uri in uris, f"resources/list: {uris}")
        templates = (await bob.client.list_resource_templates()).resource_templates
        expect(
            [t.uri_template for t in templates] == ["crewbus://conversations/{conversation_id}"],
            f"resources/templates/list: {templates}",
        )
        read = (await bob.client.read_resource(conv_uri)).contents
        expect(len(read) == 1 and read[0].mime_type == "application/json", f"resources/read: {read}")
        shown = json.loads(read[0].text)
        expect(shown["conversation"]["id"] == conv_id, f"resources/read answered {shown['conversation']}")
        expect({"alice", "bob"} <= {m["name"] for m in shown["members"]}, f"resource members: {shown['members']}")
        fenced = [m["body"] for m in shown["messages"]]
        expect(
            len(fenced) == 1 and body in fenced[0] and f"[fence {shown['fence']}]" in fenced[0],
            f"resource messages: {fenced}",
        )
        inbox = json.loads((await bob.client.read_resource("crewbus://inbox")).contents[0].text)
        expect(isinstance(inbox.get("pending"), int), f"inbox resource: {inbox}")
        try:
            await bob.client.read_resource(f"crewbus://conversations/{uuid.uuid4()}")
            expect(False, "resources/read of an unknown conversation answered")
        except MCPError as e:
            expect(e.error.code in (-32002, -32602), f"resources/read of an unknown conversation: {e.error}")

        # A bus error is a tool result, not a protocol error.
        err = await bob.call("get_conversation", {"conversation_id": str(uuid.uuid4())}, error=True)
        expect(error_code(err) == "not_found", f"get_conversation of a random id: code {error_code(err)}: {_text(err)}")


async def check_stdio_bridge(bus: harness.Crewbus, mode: str) -> None:
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            async with http_agent(bus, "alice", mode) as alice, stdio_agent(bus, "bob", mode, errlog) as bob:
                me = await bob.call("whoami", {})
                expect(me["name"] == "bob", f"whoami through the bridge says {me['name']}")
                conv = await alice.call("create_conversation", {"title": f"bridge {mode}", "members": [me["id"]]})
                _, delivery = await send_while_waiting(alice, bob, bus, conv["id"], f"through the bridge ({mode})")
                confirmed = await bob.call("confirm_deliveries", {"deliveries": [delivery["delivery_id"]]})
                expect([r["outcome"] for r in confirmed["results"]] == ["confirmed"], f"confirm: {confirmed}")
                err = await bob.call("get_conversation", {"conversation_id": str(uuid.uuid4())}, error=True)
                expect(error_code(err) == "not_found", f"error through the bridge: {error_code(err)}")
        except BaseException:
            errlog.seek(0)
            print(f"--- crewbus mcp stderr ---\n{errlog.read()[-3000:]}", flush=True)
            raise


async def check_core_profile(bus: harness.Crewbus, mode: str) -> None:
    """The core tool profile over Streamable HTTP (`?tools=core`) and through the bridge
    (`--tools core`): exactly its twelve tools, none with an outputSchema; a tool it does not list
    is still callable, and answers keep their structuredContent."""
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            async with (
                http_agent(bus, "alice", mode, url=f"{bus.mcp_url}?tools=core") as http,
                stdio_agent(bus, "bob", mode, errlog, ("--tools", "core")) as bridged,
            ):
                for agent, how in ((http, "?tools=core"), (bridged, "the bridge's --tools core")):
                    tools = await agent.list_tools()
                    names = {t.name for t in tools}
                    expect(names == CORE_TOOLS, f"{how}: tools/list names {sorted(names)}")
                    with_schema = [t.name for t in tools if t.output_schema is not None]
                    expect(not with_schema, f"{how}: output schemas on {with_schema}")
                    me = await agent.client.call_tool("whoami", {})
                    expect(
                        not me.is_error and isinstance(me.structured_content, dict),
                        f"{how}: whoami gives no structuredContent: {_text(me)}",
                    )
                    unlisted = await agent.client.call_tool("list_conversations", {})
                    expect(
                        not unlisted.is_error
                        and isinstance((unlisted.structured_content or {}).get("conversations"), list),
                        f"{how}: list_conversations (not in core) failed: {_text(unlisted)}",
                    )
        except BaseException:
            errlog.seek(0)
            print(f"--- crewbus mcp stderr ---\n{errlog.read()[-3000:]}", flush=True)
            raise


async def check_auto_negotiates_2026(bus: harness.Crewbus, _mode: str) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bus.tokens['alice']}"})
    async with http, Client(streamable_http_client(bus.mcp_url, http_client=http), mode="auto") as client:
        expect(client.protocol_version == "2026-07-28", f"mode=auto negotiated {client.protocol_version}")


async def check_no_token_is_401(bus: harness.Crewbus, _mode: str) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "crewbus-mcp-tests", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    # One connection per request: the server may close a connection after a 401 without saying
    # so (`Connection: close`), and a reused keep-alive connection then races that close.
    for label, extra in (("no token", {}), ("a wrong token", {"Authorization": "Bearer cbt_not-a-token"})):
        async with httpx2.AsyncClient() as http:
            r = await http.post(bus.mcp_url, json=init, headers={**headers, **extra})
        expect(r.status_code == 401, f"{label}: HTTP {r.status_code}, expected 401")
        expect(
            r.headers.get("www-authenticate", "").lower().startswith("bearer"),
            f"{label}: WWW-Authenticate is {r.headers.get('www-authenticate')!r}",
        )


async def check_leases(bus: harness.Crewbus, mode: str) -> None:
    """Two agents coordinate through leases: a conflict names the holder, a waiting acquire is
    granted when the holder releases, and a stale fencing token is refused by check_lease."""
    async with http_agent(bus, "alice", mode) as alice, http_agent(bus, "bob", mode) as bob:
        area = f"mcp-{mode}-{uuid.uuid4().hex[:8]}"
        path = f"{area}/auth/token.rs"
        held = await alice.call("acquire_lease", {"pattern": f"{area}/**", "ttl_seconds": 60})
        expect(held["granted"] is True, f"alice's acquire: {held}")
        first = held["lease"]
        refused = await bob.call("acquire_lease", {"pattern": path})
        expect(refused["granted"] is False, f"bob's acquire was granted over alice's: {refused}")
        expect(
            [c["agent_name"] for c in refused["conflicts"]] == ["alice"],
            f"the conflict does not name alice: {refused}",
        )
        bad = await bob.call("acquire_lease", {"pattern": f"{area}/a?"}, error=True)
        expect(error_code(bad) == "invalid", f"a `?` pattern: {_text(bad)}")

        # bob waits; alice releases once the server has started bob's call.
        before = await tool_calls(bus)
        waiting = asyncio.create_task(bob.call("acquire_lease", {"pattern": path, "wait_seconds": LONG_WAIT_S}))
        try:
            deadline = time.monotonic() + 10
            while await tool_calls(bus) <= before:
                expect(time.monotonic() < deadline, "the server did not start bob's acquire within 10 s")
                await asyncio.sleep(0.005)
            expect(not waiting.done(), f"bob's waiting acquire ended before the release: {waiting}")
            released_at = time.monotonic()
            gone = await alice.call("release_lease", {"lease_id": first["id"]})
            expect(gone["end_reason"] == "released", f"release_lease: {gone}")
            got = await asyncio.wait_for(waiting, WAKE_DEADLINE_S + LONG_WAIT_S)
        finally:
            waiting.cancel()
        woke = time.monotonic() - released_at
        expect(got["granted"] is True, f"bob's wait did not end in a grant: {got}")
        expect(woke < WAKE_DEADLINE_S, f"bob was granted {woke:.2f} s after the release")
        second = got["lease"]
        expect(second["fencing_token"] > first["fencing_token"], f"tokens did not grow: {first} then {second}")
        print(f"    bob granted {woke * 1000:.0f} ms after alice's release", flush=True)

        # The stale token is refused by the bus's fencing check (the resource's own rule — refuse
        # a token below the greatest accepted — needs only the order asserted above).
        stale = await alice.call("check_lease", {"path": path, "fencing_token": first["fencing_token"]})
        expect(stale["held"] is False, f"check_lease took alice's stale token: {stale}")
        current = await bob.call("check_lease", {"path": path, "fencing_token": second["fencing_token"]})
        expect(current["held"] is True and current["lease"]["id"] == second["id"], f"check_lease: {current}")
        listed = await alice.call("list_leases", {"overlapping": path})
        expect([l["id"] for l in listed["leases"]] == [second["id"]], f"list_leases: {listed}")
        renewed = await bob.call("renew_lease", {"lease_id": second["id"], "ttl_seconds": 120})
        expect(renewed["fencing_token"] == second["fencing_token"], f"renew_lease changed the token: {renewed}")
        await bob.call("release_lease", {"lease_id": second["id"]})


# --- runner --------------------------------------------------------------------------------------

CHECKS: list[tuple[str, Callable[[harness.Crewbus, str], Awaitable[None]], tuple[str, ...]]] = [
    ("request without a token is 401", check_no_token_is_401, ("-",)),
    ("mode=auto negotiates 2026-07-28", check_auto_negotiates_2026, ("-",)),
    ("tools/list: the contract's tools and their outputSchemas", check_tools_list, MODES),
    ("two agents over Streamable HTTP", check_exchange, MODES),
    ("two agents coordinate with leases (conflict, wait, stale token)", check_leases, MODES),
    ("the stdio bridge (crewbus mcp --url)", check_stdio_bridge, MODES),
    ("the core tool profile (?tools=core, crewbus mcp --tools core)", check_core_profile, MODES),
]


async def run_store(store: str, binary: str, results: list[tuple[str, bool]]) -> None:
    label = f"[{store}]"
    try:
        cm = harness.server(store, binary)
        bus = cm.__enter__()
    except harness.HarnessError as e:
        print(f"FAIL {label} could not start crewbus: {e}", flush=True)
        results.append((f"{label} start", False))
        return
    try:
        for name, fn, modes in CHECKS:
            for mode in modes:
                title = f"{label} {name}" + ("" if mode == "-" else f" (mode={mode})")
                t0 = time.monotonic()
                try:
                    await asyncio.wait_for(fn(bus, mode), 120)
                    print(f"ok   {title} ({time.monotonic() - t0:.1f} s)", flush=True)
                    results.append((title, True))
                except BaseException as e:  # noqa: BLE001 - every failure is reported, then the next check runs
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    print(f"FAIL {title}: {_describe(e)}", flush=True)
                    if not isinstance(e, Failure) and os.environ.get("MCP_TESTS_VERBOSE"):
                        traceback.print_exception(e)
                    results.append((title, False))
    finally:
        cm.__exit__(None, None, None)


def _describe(e: BaseException) -> str:
    """The leaf exceptions of `e` (task groups nest them), one line each."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_describe(x) for x in e.exceptions))
    return f"{type(e).__name__}: {e}" + (" (MCP_TESTS_VERBOSE=1 for the traceback)" if not isinstance(e, Failure) else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", action="append", choices=["memory", "postgres-jetstream"])
    args = parser.parse_args()
    stores = args.store or ["memory", "postgres-jetstream"]
    results: list[tuple[str, bool]] = []
    try:
        binary = harness.crewbus_binary()
    except harness.HarnessError as e:
        print(f"FAIL {e}")
        print("0 passed, 1 failed")
        return 1
    for store in stores:
        asyncio.run(run_store(store, binary, results))
    passed = sum(1 for _, ok in results if ok)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
