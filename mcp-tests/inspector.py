"""The MCP Inspector's tool-schema portability check (npm `@modelcontextprotocol/inspector` 2.12.0,
its CLI) against crewbus on the memory store (the MCP layer is the same on every store).

`inspector --cli URL --method tools/list --strict --format json` prints one JSON object whose
`schemaFindings` lists, per tool, every portability finding of its input and output schemas
(rules `type-union`, `remote-ref`, `untyped-schema` are warnings, `boolean-schema` an error).
The inspector itself exits 6 on an error-severity finding only, never on a warning; this check
fails on any finding at all, in either protocol era the inspector speaks (`--protocol-era legacy`,
the handshake; `modern`, 2026-07-28), and on a tools/list that lists no tool.

Usage: `python inspector.py` (needs `CREWBUS_BIN` or target/debug/crewbus, `MCP_NODE`,
`MCP_NODE_DIR`). Ends with `N passed, N failed` (one per era); exit 1 on any failure. The
inspector's own files (catalog, client config) go to a temporary HOME.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import harness


def strict_tools_list(node: str, cli: str, url: str, token: str, era: str, home: str) -> list[str]:
    """The problems of one `tools/list --strict` run: its findings, or why it did not run."""
    env = harness.child_env({"HOME": home})
    proc = subprocess.run(
        [node, cli, "--cli", url, "--transport", "http", "--protocol-era", era,
         "--header", f"Authorization: Bearer {token}",
         "--method", "tools/list", "--strict", "--format", "json"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    if proc.returncode != 0:
        return [f"the inspector exited {proc.returncode}: {proc.stderr[-2000:]}"]
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        return [f"the inspector's output is not JSON ({e}): {proc.stdout[:500]}"]
    tools = out.get("result", {}).get("tools", [])
    if not tools:
        return [f"tools/list listed no tool: {proc.stdout[:500]}"]
    problems = []
    for tool in out.get("schemaFindings", []):
        for f in tool["findings"]:
            problems.append(f"{tool['toolName']}: {f['severity']} {f['rule']} at {f['schema']}.{f['path']}")
    print(f"  {era}: {len(tools)} tools, {len(problems)} findings")
    return problems


def main() -> int:
    node, node_dir = os.environ.get("MCP_NODE"), os.environ.get("MCP_NODE_DIR")
    if not node or not node_dir:
        raise harness.HarnessError("MCP_NODE and MCP_NODE_DIR are not set (scripts/lib/mcp-clients.sh)")
    cli = os.path.join(node_dir, "node_modules", "inspector", "clients", "launcher", "build", "index.js")
    if not os.path.isfile(cli):
        raise harness.HarnessError(f"no inspector at {cli}")
    tally = []
    with harness.memory_server(harness.crewbus_binary()) as crewbus, tempfile.TemporaryDirectory() as home:
        for era in ["legacy", "modern"]:
            problems = strict_tools_list(node, cli, crewbus.mcp_url, crewbus.tokens["alice"], era, home)
            for p in problems:
                print(f"  FAIL {era}: {p}")
            tally.append(not problems)
    passed = sum(tally)
    failed = len(tally) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
