"""The real-host suite: Claude Code in print mode against a scripted model, with crewbus.

Usage (inside the loopback-only namespace scripts/host-tests makes; refused elsewhere):
`python3 run.py [--only SUBSTRING]...`. Needs the crewbus binary (`CREWBUS_BIN`, else
target/debug/crewbus) and Claude Code's native binary (`CLAUDE_BIN`, else the one
scripts/lib/claude-code.sh installs in .tools/claude-code). Every request Claude Code sent the
scripted model is kept, one JSON line each, in `HOST_TESTS_ARTIFACTS` (default
target/claude-code/), one file per scenario.

Prints one line per scenario (`ok` with its time, or `FAIL` with the reason) and ends with
`N passed, N failed`; exit code 1 when anything failed or nothing ran.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the work tree

import harness as H  # noqa: E402
import scenarios  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="run the scenarios whose title contains this")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (projects, HOMEs, logs)")
    args = ap.parse_args()
    try:
        H.check_isolated()
        crewbus, claude = H.crewbus_binary(), H.claude_binary()
    except H.HarnessError as e:
        print(f"host tests: {e}", file=sys.stderr)
        return 1
    artifacts = Path(os.environ.get("HOST_TESTS_ARTIFACTS") or H.REPO / "target" / "claude-code")
    if artifacts.exists():
        shutil.rmtree(artifacts)
    artifacts.mkdir(parents=True)
    root = Path(tempfile.mkdtemp(prefix="crewbus-host-tests-"))
    ctx = scenarios.Ctx(crewbus=crewbus, claude=claude, root=root, artifacts=artifacts)

    passed, failed = 0, []
    started = time.monotonic()
    for title, fn in scenarios.SCENARIOS:
        if args.only and not any(o in title for o in args.only):
            continue
        t0 = time.monotonic()
        ctx.notes.clear()
        try:
            fn(ctx)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - every failure is reported, then the next scenario runs
            print(f"FAIL {title} ({time.monotonic() - t0:.1f} s): {type(e).__name__}: {e}", flush=True)
            if not isinstance(e, (H.Failure, H.HarnessError)) or os.environ.get("HOST_TESTS_VERBOSE"):
                traceback.print_exception(e)
            failed.append(title)
            continue
        print(f"ok   {title} ({time.monotonic() - t0:.1f} s)", flush=True)
        for n in ctx.notes:
            print(f"     {n}", flush=True)
        passed += 1
    print(f"{passed} passed, {len(failed)} failed in {time.monotonic() - started:.1f} s; recorded requests in {artifacts}")
    if failed or args.keep:
        print(f"work directory kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if passed and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
