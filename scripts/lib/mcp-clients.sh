# The real MCP clients of the MCP tests (sourced by scripts/test and scripts/mcp-tests after
# services.sh): the official Python MCP SDK in a venv and Node 22 with the MCP conformance suite,
# all pinned by files committed under mcp-tests/ and installed into the ignored .tools/:
#   .tools/mcp-venv   python3 -m venv + `pip install -r mcp-tests/requirements.txt` (every
#                     package ==-pinned, the SDK's dependencies included)
#   .tools/mcp-node   `npm ci` of mcp-tests/node/package.json + package-lock.json: the npm
#                     package node@22 (the runtime), two releases of
#                     @modelcontextprotocol/conformance (one per protocol revision tested) and
#                     @modelcontextprotocol/inspector (its CLI's --strict schema check)
# Each install is redone when its pin file changes (a copy of the pins is kept next to it).
# Debian's npm (apt) installs the tools when no npm is on PATH; the suite itself runs on the
# Node 22 of .tools/mcp-node, whatever node Debian's npm runs on.

MCP_VENV="$PWD/.tools/mcp-venv"
MCP_NODE_DIR="$PWD/.tools/mcp-node"

setup_mcp_clients() {
  local req=mcp-tests/requirements.txt
  if ! cmp -s "$req" "$MCP_VENV/.pins" 2>/dev/null || [ ! -x "$MCP_VENV/bin/python" ]; then
    echo "mcp clients: installing the Python MCP SDK ($req) into .tools/mcp-venv"
    rm -rf "$MCP_VENV"
    python3 -m venv "$MCP_VENV" || { echo "mcp clients: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
    "$MCP_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$req" \
      || { echo "mcp clients: pip install -r $req failed" >&2; exit 1; }
    "$MCP_VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null \
      || { echo "mcp clients: the pins of $req are not a consistent set:" >&2; "$MCP_VENV/bin/python" -m pip check >&2; exit 1; }
    cp "$req" "$MCP_VENV/.pins"
  fi
  MCP_PYTHON="$MCP_VENV/bin/python"
  echo "mcp clients: Python MCP SDK $("$MCP_PYTHON" -c 'import importlib.metadata as m; print(m.version("mcp"))') in .tools/mcp-venv"

  local lock=mcp-tests/node/package-lock.json
  if ! cmp -s "$lock" "$MCP_NODE_DIR/.pins" 2>/dev/null || [ ! -x "$MCP_NODE_DIR/node_modules/.bin/node" ]; then
    if ! command -v npm >/dev/null 2>&1; then
      echo "mcp clients: installing Debian's npm"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
    fi
    command -v npm >/dev/null 2>&1 || { echo "mcp clients: npm could not be installed" >&2; exit 1; }
    echo "mcp clients: installing Node 22 and the MCP conformance suite ($lock) into .tools/mcp-node"
    rm -rf "$MCP_NODE_DIR"
    mkdir -p "$MCP_NODE_DIR"
    cp mcp-tests/node/package.json "$lock" "$MCP_NODE_DIR/"
    npm ci --prefix "$MCP_NODE_DIR" --no-audit --no-fund --loglevel=error >/dev/null \
      || { echo "mcp clients: npm ci of $lock failed" >&2; exit 1; }
    cp "$lock" "$MCP_NODE_DIR/.pins"
  fi
  MCP_NODE="$MCP_NODE_DIR/node_modules/.bin/node"
  "$MCP_NODE" --version >/dev/null 2>&1 || { echo "mcp clients: $MCP_NODE does not run" >&2; exit 1; }
  local v
  for v in 2025 2026; do
    [ -f "$MCP_NODE_DIR/node_modules/conformance-$v/dist/index.js" ] \
      || { echo "mcp clients: conformance-$v missing in .tools/mcp-node" >&2; exit 1; }
  done
  [ -f "$MCP_NODE_DIR/node_modules/inspector/clients/launcher/build/index.js" ] \
    || { echo "mcp clients: the inspector is missing in .tools/mcp-node" >&2; exit 1; }
  echo "mcp clients: node $("$MCP_NODE" --version), conformance" \
    "$("$MCP_NODE" "$MCP_NODE_DIR/node_modules/conformance-2025/dist/index.js" --version)" \
    "and $("$MCP_NODE" "$MCP_NODE_DIR/node_modules/conformance-2026/dist/index.js" --version)," \
    "inspector $("$MCP_NODE" "$MCP_NODE_DIR/node_modules/inspector/clients/launcher/build/index.js" --version)"
  export MCP_PYTHON MCP_NODE MCP_NODE_DIR
}

# The MCP tests (after setup_postgres and setup_nats): the e2e test of the Python SDK on the
# memory store and on Postgres + JetStream (Debian's nats-server), the conformance suite, then
# the MCP Inspector's --strict schema-portability check (any finding fails it).
# The crewbus binary is the workspace build of the test run (`cargo build --workspace
# --all-features --bin crewbus` after `cargo test --workspace --all-features` builds nothing new),
# copied aside so a concurrent build cannot swap it mid-run. Every part runs; any failing fails
# the step, loudly, with its `N passed, N failed` line.
run_mcp_tests() {
  step "MCP clients: the Python MCP SDK and the conformance suite (.tools/)"
  setup_mcp_clients

  step "MCP tests: the crewbus binary"
  cargo build --workspace --all-features --bin crewbus
  local target="${CARGO_TARGET_DIR:-$PWD/target}" bin_dir
  bin_dir="$(mktemp -d /tmp/crewbus-mcp-bin-XXXXXX)"
  on_exit "rm -rf '$bin_dir'"
  cp "$target/debug/crewbus" "$bin_dir/crewbus"
  export CREWBUS_BIN="$bin_dir/crewbus"

  local failed=()
  step "MCP e2e: the Python MCP SDK (legacy and 2026-07-28; memory, Postgres + JetStream; stdio bridge)"
  NATS_SERVER_BIN="$NATS_DEBIAN" "$MCP_PYTHON" mcp-tests/e2e.py || failed+=("the MCP e2e test (mcp-tests/e2e.py)")

  step "MCP conformance suite (2025-11-25 and 2026-07-28, through the bearer proxy)"
  "$MCP_PYTHON" mcp-tests/conformance.py || failed+=("the MCP conformance suite (mcp-tests/conformance.py)")

  step "MCP Inspector --strict: no tool-schema portability finding (warnings included)"
  "$MCP_PYTHON" mcp-tests/inspector.py || failed+=("the inspector's schema check (mcp-tests/inspector.py)")

  if [ "${#failed[@]}" -gt 0 ]; then
    printf 'MCP tests FAILED: %s\n' "${failed[@]}" >&2
    exit 1
  fi
}
