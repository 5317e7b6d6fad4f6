"""The browser suite: the smoke checks of the harness (smoke.py, against a stub server), then the
console checks (console_checks.py) once per store, each against a fresh `crewbus serve`.

Usage: `python run.py [--store sqlite|memory|postgres]... [--smoke-only] [--only SUBSTRING]`
(default stores: sqlite, memory, postgres; postgres needs DATABASE_URL). Needs Debian's chromium
(`CHROMIUM_BIN`, default /usr/bin/chromium), axe-core in .tools/browser-node (`AXE_DIR`) and the
crewbus binary (`CREWBUS_BIN`, else target/debug/crewbus). Screenshots and axe results go to
`BROWSER_ARTIFACTS` (default target/console-screenshots/), printed at the end.

Prints one line per check (`ok`, `FAIL`, or `n/a` for a check the store declares it cannot
run, with the reason) and ends with `N passed, N failed, N skipped`; exit code 1 when anything
failed or nothing passed. `BROWSER_TESTS_VERBOSE=1` prints tracebacks.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback
from typing import Any, Callable

sys.dont_write_bytecode = True  # no __pycache__ in the work tree

import console_checks  # noqa: E402
import harness  # noqa: E402
import smoke  # noqa: E402
from stub import Stub  # noqa: E402


class Results:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []
        self.skipped: list[str] = []

    def run(self, title: str, fn: Callable[[], Any]) -> bool:
        t0 = time.monotonic()
        try:
            fn()
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - every failure is reported, then the next check runs
            print(f"FAIL {title}: {type(e).__name__}: {e}", flush=True)
            if os.environ.get("BROWSER_TESTS_VERBOSE") or not isinstance(e, (harness.Failure, harness.HarnessError)):
                traceback.print_exception(e)
            self.failed.append(title)
            return False
        print(f"ok   {title} ({time.monotonic() - t0:.1f} s)", flush=True)
        self.passed += 1
        return True

    def skip(self, title: str, why: str) -> None:
        print(f"n/a  {title}: {why}", flush=True)
        self.skipped.append(title)


def run_smoke(browser: harness.Browser, results: Results) -> None:
    with Stub() as stub:
        ctx = smoke.SmokeContext(browser=browser, stub=stub)
        for title, fn in smoke.CHECKS:
            results.run(f"[smoke] {title}", lambda fn=fn: fn(ctx))


def run_store(store: str, browser: harness.Browser, binary: str, results: Results, only: str | None) -> None:
    for check in console_checks.CHECKS:
        title = f"[{store}] {check.title}"
        if only and only not in check.title:
            continue
        why = check.not_on.get(store)
        if why:
            results.skip(title, why)
            continue

        def one(check: console_checks.Check = check) -> None:
            with harness.server(store, binary) as bus:
                pages = harness.Pages(browser, store, check.fn.__name__)
                c = console_checks.Ctx(bus=bus, browser=browser, pages=pages)
                try:
                    check.fn(c)
                finally:
                    c.close()
                bus.assert_alive()
                log = bus.log_tail(1 << 20)
                harness.expect("panicked" not in log, f"crewbus serve panicked:\n{log[-3000:]}")

        results.run(title, one)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", action="append", choices=harness.STORES)
    parser.add_argument("--smoke-only", action="store_true", help="only the smoke checks of the harness (no crewbus)")
    parser.add_argument("--only", help="only the console checks whose title contains this")
    parser.add_argument("--no-smoke", action="store_true", help="leave out the smoke checks of the harness")
    args = parser.parse_args()
    stores = args.store or list(harness.STORES)
    results = Results()
    shutil.rmtree(harness.ARTIFACTS, ignore_errors=True)
    harness.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        harness.axe_script()
        browser = harness.Browser()
        browser.__enter__()
    except Exception as e:  # noqa: BLE001 - reported as the run's failure
        print(f"FAIL the browser could not start: {type(e).__name__}: {e}")
        print("0 passed, 1 failed")
        return 1
    try:
        print(f"browser: chromium {browser.version} ({harness.CHROMIUM}), axe-core {harness.axe_version()}", flush=True)
        if not args.no_smoke:
            run_smoke(browser, results)
        if not args.smoke_only:
            try:
                binary = harness.crewbus_binary()
            except harness.HarnessError as e:
                print(f"FAIL {e}", flush=True)
                results.failed.append("crewbus binary")
            else:
                for store in stores:
                    run_store(store, browser, binary, results, args.only)
    finally:
        browser.__exit__(None, None, None)
    shots = sorted(harness.ARTIFACTS.rglob("*.png"))
    print(f"screenshots: {len(shots)} PNG in {harness.ARTIFACTS}", flush=True)
    if results.failed:
        print("failed:\n  " + "\n  ".join(results.failed), flush=True)
    if results.skipped:
        print("not applicable (declared by the store):\n  " + "\n  ".join(results.skipped), flush=True)
    print(f"{results.passed} passed, {len(results.failed)} failed, {len(results.skipped)} skipped")
    return 0 if not results.failed and results.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
