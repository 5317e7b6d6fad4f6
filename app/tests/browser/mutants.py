"""Proves the console checks can fail: runs them against the fake console (fake_crewbus.py) once
per fault it can inject (`FAKE_CONSOLE_BUG`), each time only the checks that must catch it, and
reports every fault that no check caught. Not part of scripts/test (about 2 minutes); run it
after changing a check: `.tools/browser-venv/bin/python app/tests/browser/mutants.py`.
Ends with `N passed, N failed` (a fault caught is a pass).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True

from fake_crewbus import BUG_NAMES  # noqa: E402

# Which checks (a substring of their titles) must fail under each fault.
CAUGHT_BY = {
    "xss-live": "hostile",
    "xss-rendered": "hostile",
    "csp-unsafe": "every page",
    "no-csrf": "CSRF",
    "code-reuse": "code used twice",
    "no-live": "appears live",
    "no-receipt-live": "appears live",
    "reload": "appears live",
    "revoke-lazy": "revoking",
    "scope-leak": "another team",
    "signout-noop": "sign-out",
    "inline-style": "every page",
    "axe": "overview shows",
    "bidi-raw": "bidirectional",
}


def main() -> int:
    missing = set(BUG_NAMES) - set(CAUGHT_BY)
    if missing:
        print(f"FAIL faults of the fake with no check named to catch them: {sorted(missing)}")
        print("0 passed, 1 failed")
        return 1
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="crewbus-mutants-") as d:
        for bug, only in CAUGHT_BY.items():
            wrapper = Path(d) / f"crewbus-{bug}"
            wrapper.write_text(f'#!/bin/sh\nFAKE_CONSOLE_BUG={bug} exec "{sys.executable}" "{HERE / "fake_crewbus.py"}" "$@"\n')
            wrapper.chmod(0o755)
            env = dict(os.environ, CREWBUS_BIN=str(wrapper), BROWSER_ARTIFACTS=str(Path(d) / "artifacts"))
            r = subprocess.run(
                [sys.executable, str(HERE / "run.py"), "--store", "sqlite", "--no-smoke", "--only", only],
                env=env, capture_output=True, text=True, timeout=600,
            )
            fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL [sqlite]")]
            if fails and r.returncode != 0:
                print(f"ok   fault {bug} ({BUG_NAMES[bug]}) caught: {fails[0][:200]}", flush=True)
                passed += 1
            else:
                print(f"FAIL fault {bug} ({BUG_NAMES[bug]}) not caught by the checks matching {only!r}", flush=True)
                failed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
