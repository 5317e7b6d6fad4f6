# The browser tests of the console (sourced by scripts/test and scripts/browser-tests after
# services.sh): Debian's chromium driven by Playwright for Python, with axe-core injected into
# each page. The suite is app/tests/browser (run.py); everything it uses is pinned by files
# committed there and installed into the ignored .tools/:
#   /usr/bin/chromium     Debian's `chromium` (apt), installed when missing. Playwright never
#                         downloads a browser here (`playwright install` is never run): the
#                         suite launches this binary with executable_path.
#   .tools/browser-venv   python3 -m venv + `pip install --no-deps -r app/tests/browser/
#                         requirements.txt` (playwright, greenlet, pyee, typing_extensions, each
#                         ==-pinned), then `pip check`
#   .tools/browser-node   `npm ci` of app/tests/browser/package.json + package-lock.json: axe-core
#                         (MPL-2.0, a test-only asset; its LICENSE comes with the package and the
#                         suite refuses a copy without it)
# Each install is redone when its pin file changes (a copy of the pins is kept next to it).

BROWSER_VENV="$PWD/.tools/browser-venv"
BROWSER_NODE_DIR="$PWD/.tools/browser-node"
CHROMIUM_BIN="${CHROMIUM_BIN:-/usr/bin/chromium}"
BROWSER_SUITE=app/tests/browser

setup_browser() {
  if [ ! -x "$CHROMIUM_BIN" ]; then
    if [ "$CHROMIUM_BIN" != /usr/bin/chromium ]; then
      echo "browser: CHROMIUM_BIN=$CHROMIUM_BIN is not an executable" >&2; exit 1
    fi
    echo "browser: installing Debian's chromium"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null \
      || { echo "browser: apt-get install chromium failed" >&2; exit 1; }
    [ -x "$CHROMIUM_BIN" ] || { echo "browser: Debian's chromium did not provide $CHROMIUM_BIN" >&2; exit 1; }
  fi
  export CHROMIUM_BIN

  local req="$BROWSER_SUITE/requirements.txt"
  if ! cmp -s "$req" "$BROWSER_VENV/.pins" 2>/dev/null || [ ! -x "$BROWSER_VENV/bin/python" ]; then
    echo "browser: installing Playwright for Python ($req) into .tools/browser-venv"
    rm -rf "$BROWSER_VENV"
    python3 -m venv "$BROWSER_VENV" || { echo "browser: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
    "$BROWSER_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$req" \
      || { echo "browser: pip install -r $req failed" >&2; exit 1; }
    "$BROWSER_VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null \
      || { echo "browser: the pins of $req are not a consistent set:" >&2; "$BROWSER_VENV/bin/python" -m pip check >&2; exit 1; }
    cp "$req" "$BROWSER_VENV/.pins"
  fi
  BROWSER_PYTHON="$BROWSER_VENV/bin/python"

  local lock="$BROWSER_SUITE/package-lock.json"
  if ! cmp -s "$lock" "$BROWSER_NODE_DIR/.pins" 2>/dev/null || [ ! -f "$BROWSER_NODE_DIR/node_modules/axe-core/axe.min.js" ]; then
    if ! command -v npm >/dev/null 2>&1; then
      echo "browser: installing Debian's npm"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
    fi
    command -v npm >/dev/null 2>&1 || { echo "browser: npm could not be installed" >&2; exit 1; }
    echo "browser: installing axe-core ($lock) into .tools/browser-node"
    rm -rf "$BROWSER_NODE_DIR"
    mkdir -p "$BROWSER_NODE_DIR"
    cp "$BROWSER_SUITE/package.json" "$lock" "$BROWSER_NODE_DIR/"
    npm ci --prefix "$BROWSER_NODE_DIR" --no-audit --no-fund --loglevel=error >/dev/null \
      || { echo "browser: npm ci of $lock failed" >&2; exit 1; }
    cp "$lock" "$BROWSER_NODE_DIR/.pins"
  fi
  local axe="$BROWSER_NODE_DIR/node_modules/axe-core"
  [ -f "$axe/axe.min.js" ] && [ -f "$axe/LICENSE" ] \
    || { echo "browser: axe-core in .tools/browser-node lacks axe.min.js or its LICENSE" >&2; exit 1; }
  export AXE_DIR="$axe"

  # Debian's wrapper script prints a harmless shell warning on some machines: keep the version line.
  echo "browser: $("$CHROMIUM_BIN" --version 2>/dev/null | grep -m1 -i chromium) ($CHROMIUM_BIN)"
  echo "browser: $("$BROWSER_PYTHON" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("playwright", "greenlet", "pyee")))') in .tools/browser-venv"
  echo "browser: axe-core $("$BROWSER_PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' "$axe/package.json") (MPL-2.0, $axe/LICENSE) in .tools/browser-node"
  export BROWSER_PYTHON
}

# The suite (after setup_postgres and setup_browser): the smoke checks of the harness, then the
# console checks on the embedded SQLite store, the memory store (`serve --ephemeral`) and a
# fresh Postgres database per check on the server of DATABASE_URL. It builds nothing: the
# crewbus binary is CREWBUS_BIN (scripts/test's MCP step copies its test-profile build aside and
# exports it), else target/debug/crewbus, and a missing one fails the step. Screenshots and axe
# results go to BROWSER_ARTIFACTS (default target/console-screenshots/). Any failure fails the
# step, loudly, with the suite's `N passed, N failed, N skipped` line.
run_browser_tests() {
  step "browser: chromium, Playwright for Python and axe-core (.tools/)"
  setup_browser

  local bin="${CREWBUS_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/crewbus}"
  [ -x "$bin" ] || { echo "browser tests: no crewbus binary at $bin (build it first: cargo build -p crewbus --bin crewbus, or set CREWBUS_BIN)" >&2; exit 1; }
  [ -n "${DATABASE_URL:-}" ] || { echo "browser tests: DATABASE_URL is not set (setup_postgres)" >&2; exit 1; }
  export BROWSER_ARTIFACTS="${BROWSER_ARTIFACTS:-${CARGO_TARGET_DIR:-$PWD/target}/console-screenshots}"

  step "browser tests: the console in chromium (sqlite, memory, postgres)"
  local started=$SECONDS
  if ! CREWBUS_BIN="$bin" "$BROWSER_PYTHON" "$BROWSER_SUITE/run.py" --store sqlite --store memory --store postgres; then
    echo "browser tests FAILED (app/tests/browser/run.py; screenshots and axe results in $BROWSER_ARTIFACTS)" >&2
    exit 1
  fi
  echo "browser tests: passed in $(( SECONDS - started )) s; screenshots in $BROWSER_ARTIFACTS"
}
