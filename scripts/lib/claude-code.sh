# The real-host tests (sourced by scripts/test and scripts/host-tests after services.sh): Claude
# Code in print mode against a scripted model, with crewbus's MCP endpoint and hooks, all inside
# one network namespace holding only loopback. The suite is app/tests/claude_code (run.py,
# Python 3 standard library only); Claude Code is pinned by files committed there and installed
# into the ignored .tools/:
#   .tools/claude-code  `npm ci --ignore-scripts` of app/tests/claude_code/package.json +
#                       package-lock.json: @anthropic-ai/claude-code and its optional
#                       @anthropic-ai/claude-code-linux-x64, whose native binary (`claude`) the
#                       suite runs directly (no Node at run time, no postinstall: the wrapper's
#                       postinstall only copies that binary; the wrapper asks for Node >= 22,
#                       which only matters to that script, so Debian's Node 20 npm installs it
#                       with an engine warning)
# The install is redone when the lock changes (a copy of it is kept next to it).

CLAUDE_CODE_DIR="$PWD/.tools/claude-code"
CLAUDE_CODE_SUITE=app/tests/claude_code
CLAUDE_CODE_VERSION=2.1.328

setup_claude_code() {
  local lock="$CLAUDE_CODE_SUITE/package-lock.json"
  local bin="$CLAUDE_CODE_DIR/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
  if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
    echo "claude code: the host tests run the linux-x64 binary; this machine is $(uname -s)-$(uname -m)" >&2; exit 1
  fi
  if ! cmp -s "$lock" "$CLAUDE_CODE_DIR/.pins" 2>/dev/null || [ ! -x "$bin" ]; then
    if ! command -v npm >/dev/null 2>&1; then
      echo "claude code: installing Debian's npm"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
    fi
    command -v npm >/dev/null 2>&1 || { echo "claude code: npm could not be installed" >&2; exit 1; }
    echo "claude code: installing @anthropic-ai/claude-code ($lock) into .tools/claude-code"
    rm -rf "$CLAUDE_CODE_DIR"
    mkdir -p "$CLAUDE_CODE_DIR"
    cp "$CLAUDE_CODE_SUITE/package.json" "$lock" "$CLAUDE_CODE_DIR/"
    npm ci --prefix "$CLAUDE_CODE_DIR" --ignore-scripts --engine-strict=false --no-audit --no-fund --loglevel=error >/dev/null \
      || { echo "claude code: npm ci of $lock failed" >&2; exit 1; }
    cp "$lock" "$CLAUDE_CODE_DIR/.pins"
  fi
  [ -x "$bin" ] || { echo "claude code: no native binary at $bin after npm ci" >&2; exit 1; }
  local version
  version="$("$bin" --version 2>/dev/null || true)"
  case "$version" in
    "$CLAUDE_CODE_VERSION "*) ;;
    *) echo "claude code: $bin says '$version', not $CLAUDE_CODE_VERSION (the pin of $lock)" >&2; exit 1 ;;
  esac
  echo "claude code: $version in .tools/claude-code"
  export CLAUDE_BIN="$bin"
}

# The suite (after setup_claude_code): re-run under `unshare --net --pid --fork --mount-proc`, so
# crewbus, the scripted model and Claude Code share a network namespace with only `lo` (brought
# up first; run.py refuses to run if any other interface is there) and every process the suite
# starts dies with it. It builds nothing: the crewbus binary is CREWBUS_BIN (scripts/test's MCP
# step copies its build aside and exports it), else target/debug/crewbus. Needs root for the
# namespaces. Recorded requests: HOST_TESTS_ARTIFACTS (default target/claude-code/).
run_host_tests() {
  step "claude code: the pinned host (.tools/claude-code)"
  setup_claude_code

  local bin="${CREWBUS_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/crewbus}"
  [ -x "$bin" ] || { echo "host tests: no crewbus binary at $bin (build it first: cargo build -p crewbus --bin crewbus, or set CREWBUS_BIN)" >&2; exit 1; }
  if ! unshare --net --pid --fork --mount-proc true 2>/dev/null; then
    echo "host tests: network and pid namespaces cannot be made here (unshare --net --pid needs root); refusing to run" >&2
    exit 1
  fi
  command -v ip >/dev/null 2>&1 || { echo "host tests: ip is missing (apt-get install iproute2)" >&2; exit 1; }
  export HOST_TESTS_ARTIFACTS="${HOST_TESTS_ARTIFACTS:-${CARGO_TARGET_DIR:-$PWD/target}/claude-code}"

  step "host tests: Claude Code $CLAUDE_CODE_VERSION, crewbus and the scripted model in a loopback-only namespace"
  local started=$SECONDS
  if ! CREWBUS_BIN="$bin" unshare --net --pid --fork --mount-proc \
      sh -c 'ip link set lo up && exec python3 "$0" "$@"' "$CLAUDE_CODE_SUITE/run.py" "$@"; then
    echo "host tests FAILED (app/tests/claude_code/run.py; recorded requests in $HOST_TESTS_ARTIFACTS)" >&2
    exit 1
  fi
  echo "host tests: passed in $(( SECONDS - started )) s; recorded requests in $HOST_TESTS_ARTIFACTS"
}
