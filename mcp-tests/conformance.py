"""The official MCP conformance suite (npm `@modelcontextprotocol/conformance`) against crewbus.

crewbus runs on the memory store (the MCP layer is the same on every store) with a dev agent;
the suite sends no headers, so it talks to `auth_proxy.AuthProxy`, which adds the agent's bearer
and forwards Host and Origin unchanged. Two runs, each on Node 22 (`MCP_NODE`), from the releases
installed by scripts/lib/mcp-clients.sh into `MCP_NODE_DIR`:

- release 0.1.16 (`conformance-2025`), `--spec-version 2025-11-25`: its active server suite at
  the handshake revision. Must pass: server-initialize, ping, tools-list, dns-rebinding-protection.
- release 0.2.0-alpha.12 (`conformance-2026`, the first with the 2026-07-28 scenarios),
  `--requirements 2026-07-28`: every server scenario that revision requires, plus the extension
  and pending ones the suite reports alongside. Must pass: server-stateless, tools-list,
  dns-rebinding-protection.

Every other scenario run passes or is listed in the run's committed expected-failures file
(mcp-tests/conformance/expected-failures-*.yaml, the suite's `--expected-failures` format, one
comment per entry saying why it does not apply). The suite itself fails a run on an unexpected
failure or a listed scenario that passes (a stale entry); this harness checks the same from the
suite's checks.json files, and also that no must-pass scenario is listed, that every entry names
a scenario the release has and carries a comment, and that every must-pass scenario ran with at
least one successful check. A scenario fails when any of its checks has status FAILURE.

Usage: `python conformance.py` (needs `CREWBUS_BIN` or target/debug/crewbus, `MCP_NODE`,
`MCP_NODE_DIR`). Ends with `N passed, N failed` (one per run and per requirement); exit 1 on any
failure. `--keep DIR` keeps the suite's results there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import auth_proxy
import harness

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass
class Run:
    label: str
    package: str
    args: list[str]
    expected_failures: Path
    must_pass: list[str]
    per_check_entries: bool
    """Whether the release takes `scenario:check-id` entries (0.2.0 does, 0.1.16 does not)."""


RUNS = [
    Run(
        label="2025-11-25 (conformance 0.1.16)",
        package="conformance-2025",
        args=["--spec-version", "2025-11-25"],
        expected_failures=HERE / "conformance/expected-failures-2025-11-25.yaml",
        must_pass=["server-initialize", "ping", "tools-list", "dns-rebinding-protection"],
        per_check_entries=False,
    ),
    Run(
        label="2026-07-28 (conformance 0.2.0-alpha.12)",
        package="conformance-2026",
        args=["--requirements", "2026-07-28", "--timeout", "20000"],
        expected_failures=HERE / "conformance/expected-failures-2026-07-28.yaml",
        must_pass=["server-stateless", "tools-list", "dns-rebinding-protection"],
        per_check_entries=True,
    ),
]

ENTRY = re.compile(r"^\s*-\s*([A-Za-z0-9_./-]+)(?::([A-Za-z0-9_./-]+))?\s*(#.*)?$")

# The suite counts a check of either status as a failure of its scenario (both releases).
FAILING = ("FAILURE", "WARNING")


def read_expected_failures(path: Path, per_check: bool) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The server entries of an expected-failures file, as (scenario, check id or None), and the
    problems found in it (an entry without a comment, a non-server section, a per-check entry
    where the release takes none)."""
    entries: list[tuple[str, str | None]] = []
    problems: list[str] = []
    section = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.match(r"^[a-z]+:\s*(#.*)?$", line):
            section = line.split(":")[0]
            if section != "server":
                problems.append(f"{path.name}:{n}: only a server: section belongs here")
            continue
        m = ENTRY.match(line)
        if not m or section != "server":
            problems.append(f"{path.name}:{n}: not a server entry: {line!r}")
            continue
        scenario, check, comment = m.groups()
        if check and not per_check:
            problems.append(f"{path.name}:{n}: this release takes whole scenarios only, not {scenario}:{check}")
        if not comment or len(comment.strip("# ")) < 10:
            problems.append(f"{path.name}:{n}: {scenario} has no comment saying why it does not apply")
        entries.append((scenario, check))
    return entries, problems


def suite_scenarios(node: str, cli: Path) -> set[str]:
    out = subprocess.run([node, str(cli), "list", "--server"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"^\s*-\s*(\S+)", out.stdout, re.M))


def scenario_results(out_dir: Path) -> dict[str, list[dict]]:
    """Checks by scenario from the suite's `server-<scenario>-<timestamp>/checks.json`."""
    results: dict[str, list[dict]] = {}
    for checks in sorted(out_dir.glob("server-*/checks.json")):
        name = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks.parent.name)
        results[name] = json.loads(checks.read_text())
    return results


@dataclasses.dataclass
class Verdict:
    passed: list[str]
    expected: list[str]
    unexpected: list[str]
    stale: list[str]


def judge(results: dict[str, list[dict]], entries: list[tuple[str, str | None]]) -> Verdict:
    """The baseline rule of the suite, from its checks: a scenario listed whole must fail; a
    listed check must fail and every other failing check of its scenario is unexpected; a
    listed check that succeeded, or a listed scenario that passed, is stale."""
    whole = {s for s, c in entries if c is None}
    checks_listed: dict[str, set[str]] = {}
    for s, c in entries:
        if c is not None:
            checks_listed.setdefault(s, set()).add(c)
    v = Verdict([], [], [], [])
    for scenario, checks in sorted(results.items()):
        failing = {c.get("id") for c in checks if c.get("status") in FAILING}
        if scenario in whole:
            (v.expected if failing else v.stale).append(scenario)
            continue
        listed = checks_listed.get(scenario, set())
        for cid in sorted(failing):
            (v.expected if cid in listed else v.unexpected).append(f"{scenario}:{cid}" if listed else scenario)
        for cid in sorted(listed - failing):
            if any(c.get("id") == cid and c.get("status") == "SUCCESS" for c in checks):
                v.stale.append(f"{scenario}:{cid}")
        if not failing:
            v.passed.append(scenario)
    v.unexpected = list(dict.fromkeys(v.unexpected))
    return v


def self_test() -> list[str]:
    """The baseline rule on made-up results: what `judge` must find (problems, if any)."""
    ok, warn, bad = {"status": "SUCCESS", "id": "a"}, {"status": "WARNING", "id": "w"}, {"status": "FAILURE", "id": "b"}
    results = {"p": [ok], "f": [ok, bad], "listed-pass": [ok], "w": [ok, warn], "c": [ok, bad], "c2": [ok, bad]}
    entries = [("f", None), ("listed-pass", None), ("c", "b"), ("c2", "a")]
    v = judge(results, entries)
    want = Verdict(passed=["p"], expected=["c:b", "f"], unexpected=["c2:b", "w"], stale=["c2:a", "listed-pass"])
    got = Verdict(*(sorted(x) for x in (v.passed, v.expected, v.unexpected, v.stale)))
    return [] if got == want else [f"judge() found {got}, expected {want}"]


def run_suite(run: Run, node: str, node_dir: Path, url: str, out_root: Path, tally: list[tuple[str, bool]]) -> None:
    def record(what: str, ok: bool, detail: str = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'} [{run.label}] {what}{': ' + detail if detail else ''}", flush=True)
        tally.append((what, ok))

    cli = node_dir / "node_modules" / run.package / "dist/index.js"
    entries, problems = read_expected_failures(run.expected_failures, run.per_check_entries)
    known = suite_scenarios(node, cli)
    problems += [f"{s} is not a scenario of {run.package}" for s, _ in entries if s not in known]
    problems += [f"{s} must pass but is listed whole" for s in run.must_pass if (s, None) in entries]
    record(f"expected-failures file {run.expected_failures.name}", not problems, "; ".join(problems))

    out_dir = out_root / run.package
    cmd = [node, str(cli), "server", "--url", url, *run.args, "--expected-failures", str(run.expected_failures),
           "-o", str(out_dir)]
    log = out_root / f"{run.package}.log"
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=900).returncode
    text = log.read_text(errors="replace")
    summary = text[text.find("=== SUMMARY ===") :] if "=== SUMMARY ===" in text else text[-4000:]
    results = scenario_results(out_dir)
    v = judge(results, entries)
    not_run = sorted({s for s, _ in entries} - set(results))
    ok = rc == 0 and not v.unexpected and not v.stale and bool(results)
    detail = []
    if rc != 0:
        detail.append(f"the suite exited {rc}")
    if v.unexpected:
        detail.append(f"unexpected failures {v.unexpected}")
    if v.stale:
        detail.append(f"listed but passing (remove them) {v.stale}")
    if not results:
        detail.append("no scenario results")
    record(
        f"suite run: {len(results)} scenarios, {len(v.passed)} passed whole, {len(v.expected)} expected failures",
        ok,
        ", ".join(detail),
    )
    if not_run:
        print(f"     (listed but not run by this release: {not_run})")
    for s in run.must_pass:
        checks = results.get(s)
        bad = [c for c in checks or [] if c.get("status") in FAILING]
        waived = sorted({c.get("id") for c in bad} & {c for sc, c in entries if sc == s})
        unwaived = [c for c in bad if c.get("id") not in waived]
        good = bool(checks) and not unwaived and any(c.get("status") == "SUCCESS" for c in checks)
        why = "not run" if not checks else (
            "; ".join(f"{c.get('id')}: {c.get('status')} {c.get('errorMessage') or ''}".strip() for c in unwaived)
            or "no successful check"
        )
        note = f" (listed checks: {waived})" if good and waived else ""
        record(f"{s} passes{note}", good, "" if good else why)
    if not ok:
        print(summary, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="keep the suite's results and logs in this directory")
    args = parser.parse_args()
    tally: list[tuple[str, bool]] = []
    node, node_dir = os.environ.get("MCP_NODE"), os.environ.get("MCP_NODE_DIR")
    try:
        if not node or not node_dir:
            raise harness.HarnessError("MCP_NODE and MCP_NODE_DIR are not set (scripts/lib/mcp-clients.sh)")
        problems = self_test()
        print(f"{'ok  ' if not problems else 'FAIL'} the baseline rule (self-test){': ' + problems[0] if problems else ''}")
        tally.append(("self-test", not problems))
        binary = harness.crewbus_binary()
        with tempfile.TemporaryDirectory(prefix="crewbus-conformance-") as tmp:
            out_root = args.keep or Path(tmp)
            out_root.mkdir(parents=True, exist_ok=True)
            with harness.memory_server(binary) as bus, auth_proxy.AuthProxy(bus.url, bus.tokens["alice"]) as proxy:
                for run in RUNS:
                    run_suite(run, node, Path(node_dir), proxy.url + "/mcp", out_root, tally)
    except harness.HarnessError as e:
        print(f"FAIL {e}", flush=True)
        tally.append(("set-up", False))
    passed = sum(1 for _, ok in tally if ok)
    failed = len(tally) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
