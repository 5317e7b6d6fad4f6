# The outside probes of the HTTP API (sourced by scripts/test and scripts/probes after
# services.sh): tools nobody on the project wrote, run against a real `crewbus serve`.
#   openapi-spec-validator   the served /openapi.json is a valid OpenAPI 3.1 document
#   schemathesis run         `--checks all` with an agent's token on every route but the admin API,
#                            with an operator's token on the admin API (`/v1/admin/…`) only, then
#                            once without a token on everything (every 401 must be declared), a
#                            fixed seed and a bounded number of examples
# on the memory store, the embedded SQLite store and on Postgres (a fresh database on the server of DATABASE_URL, set by
# setup_postgres). Any finding fails. The operator token comes from the server itself
# (`serve --dev-operator-token-file`): on the memory store nothing beside the server can add an
# operator, and on SQLite and Postgres the same way keeps the three runs alike. The probed server runs with `bus.max_wait_ms` = 500, and
# the document's maximum for `wait_ms` must be that value, so generated waits stay short.
#
# The tools are pinned by probes/requirements.txt (every package ==-pinned, dependencies
# included) and installed into the ignored .tools/probes-venv, redone when the pins change.
# probes/schemathesis.toml holds the test data (the agents' names, the run a send names).

PROBES_VENV="$PWD/.tools/probes-venv"
# The probed server's `bus.max_wait_ms`.
PROBE_MAX_WAIT_MS=500
# Examples per operation, the seed, and a hard bound on each schemathesis run (seconds).
PROBE_MAX_EXAMPLES="${PROBE_MAX_EXAMPLES:-100}"
PROBE_ANON_EXAMPLES="${PROBE_ANON_EXAMPLES:-20}"
PROBE_SEED="${PROBE_SEED:-20261}"
PROBE_RUN_TIMEOUT="${PROBE_RUN_TIMEOUT:-300}"

setup_probe_tools() {
  local req=probes/requirements.txt
  if ! cmp -s "$req" "$PROBES_VENV/.pins" 2>/dev/null || [ ! -x "$PROBES_VENV/bin/schemathesis" ]; then
    echo "probes: installing openapi-spec-validator and schemathesis ($req) into .tools/probes-venv"
    rm -rf "$PROBES_VENV"
    python3 -m venv "$PROBES_VENV" || { echo "probes: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
    "$PROBES_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$req" \
      || { echo "probes: pip install -r $req failed" >&2; exit 1; }
    "$PROBES_VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null \
      || { echo "probes: the pins of $req are not a consistent set:" >&2; "$PROBES_VENV/bin/python" -m pip check >&2; exit 1; }
    cp "$req" "$PROBES_VENV/.pins"
  fi
  PROBE_PYTHON="$PROBES_VENV/bin/python"
  echo "probes: $("$PROBE_PYTHON" -c 'import importlib.metadata as m; print("openapi-spec-validator", m.version("openapi-spec-validator"), "and schemathesis", m.version("schemathesis"))') in .tools/probes-venv"
}

# The value of KEY in the first JSON line of FILE that has it ("" when none does).
json_field() {
  "$PROBE_PYTHON" - "$1" "$2" <<'PY'
import json, sys
path, key = sys.argv[1], sys.argv[2]
for line in open(path, errors="replace"):
    line = line.strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if key in obj:
            print(obj[key])
            break
PY
}

# Runs `crewbus … serve` (the memory store when PROBE_STORE is memory, Postgres when
# PROBE_DATABASE_URL is set, else the embedded SQLite store in $1/data) in $1 (a
# work directory) with a dev team `probe` (agents alice and bob) and an operator of every team
# (its token in $1/operator.token) on a free port of 127.0.0.1; sets PROBE_URL, PROBE_TOKEN
# (alice's), PROBE_OPERATOR_TOKEN, PROBE_TEAM (the team's id) and PROBE_PID once it answers
# /health. The child sees
# no CREWBUS_* variable but those set here (the server reads them as configuration).
start_probed_server() {
  local work="$1" deadline
  local child_env=(env -i "PATH=$PATH" "HOME=$work" "XDG_DATA_HOME=$work/data"
    "CREWBUS_BUS__MAX_WAIT_MS=$PROBE_MAX_WAIT_MS" "CREWBUS_LOG__LEVEL=warn")
  if [ "${PROBE_STORE:-}" = memory ]; then
    child_env+=("CREWBUS_STORAGE__KIND=memory")
  fi
  if [ -n "${PROBE_DATABASE_URL:-}" ]; then
    child_env+=("CREWBUS_DATABASE__URL=$PROBE_DATABASE_URL")
    "${child_env[@]}" "$CREWBUS_BIN" migrate >"$work/migrate.log" 2>&1 \
      || { echo "probes: crewbus migrate failed:" >&2; cat "$work/migrate.log" >&2; return 1; }
  fi
  (cd "$work" && exec "${child_env[@]}" "$CREWBUS_BIN" --json serve --listen 127.0.0.1:0 \
    --dev-team probe --dev-agent alice --dev-agent bob \
    --dev-operator-token-file "$work/operator.token" >"$work/serve.jsonl" 2>"$work/serve.log") &
  PROBE_PID=$!
  on_exit "kill $PROBE_PID 2>/dev/null; wait $PROBE_PID 2>/dev/null"
  deadline=$(( SECONDS + 60 ))
  PROBE_URL=""
  while [ -z "$PROBE_URL" ]; do
    PROBE_URL="$(json_field "$work/serve.jsonl" listening)"
    [ -n "$PROBE_URL" ] && break
    if ! kill -0 "$PROBE_PID" 2>/dev/null; then
      echo "probes: crewbus serve exited before listening:" >&2; tail -n 40 "$work/serve.log" >&2; return 1
    fi
    [ "$SECONDS" -lt "$deadline" ] || { echo "probes: crewbus serve printed no listening line within 60 s" >&2; return 1; }
    sleep 0.05
  done
  PROBE_URL="${PROBE_URL%/}"
  PROBE_TOKEN="$(json_field "$work/serve.jsonl" token)"
  [ -n "$PROBE_TOKEN" ] || { echo "probes: crewbus serve --json printed no dev agent token" >&2; return 1; }
  PROBE_TEAM="$(json_field "$work/serve.jsonl" team)"
  [ -n "$PROBE_TEAM" ] || { echo "probes: crewbus serve --json printed no dev team" >&2; return 1; }
  until [ -n "$(json_field "$work/serve.jsonl" admin_api)" ]; do
    kill -0 "$PROBE_PID" 2>/dev/null || { echo "probes: crewbus serve exited:" >&2; tail -n 40 "$work/serve.log" >&2; return 1; }
    [ "$SECONDS" -lt "$deadline" ] || { echo "probes: crewbus serve set up no operator within 60 s" >&2; return 1; }
    sleep 0.05
  done
  PROBE_OPERATOR_TOKEN="$(tr -d '[:space:]' <"$work/operator.token")"
  [ -n "$PROBE_OPERATOR_TOKEN" ] || { echo "probes: $work/operator.token holds no operator token" >&2; return 1; }
  until curl -fsS -o /dev/null "$PROBE_URL/health"; do
    kill -0 "$PROBE_PID" 2>/dev/null || { echo "probes: crewbus serve exited:" >&2; tail -n 40 "$work/serve.log" >&2; return 1; }
    [ "$SECONDS" -lt "$deadline" ] || { echo "probes: crewbus not healthy within 60 s" >&2; return 1; }
    sleep 0.05
  done
}

# A fresh database on the server of DATABASE_URL, dropped at exit; sets PROBE_DATABASE_URL.
fresh_probe_database() {
  [ -n "${DATABASE_URL:-}" ] || { echo "probes: DATABASE_URL is not set (setup_postgres)" >&2; return 1; }
  local psql="${PG_BIN_DIR:+$PG_BIN_DIR/}psql" name base
  name="crewbus_probe_$(date +%s)_$$"
  "$psql" -X -q -v ON_ERROR_STOP=1 -d "$DATABASE_URL" -c "CREATE DATABASE \"$name\"" \
    || { echo "probes: could not create database $name" >&2; return 1; }
  on_exit "'$psql' -X -q -d '$DATABASE_URL' -c 'DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)' >/dev/null"
  base="${DATABASE_URL%%\?*}"
  PROBE_DATABASE_URL="${base%/*}/$name"
}

# A schemathesis log ($1): whole when the run failed ($2 = 1), else its closing lines.
show_schemathesis_log() {
  if [ "$2" = 1 ]; then
    cat "$1"
  else
    grep -E "generated|passed|failures|warning" "$1" | tail -n 2
  fi
}

# The probes against one store ($1: memory, sqlite or postgres). Returns non-zero on any finding.
probe_store() {
  local store="$1" work failed=0
  work="$(mktemp -d /tmp/crewbus-probe-XXXXXX)"
  on_exit "rm -rf '$work'"
  PROBE_DATABASE_URL=""
  PROBE_STORE="$store"
  if [ "$store" = postgres ]; then
    fresh_probe_database || return 1
  fi
  start_probed_server "$work" || return 1
  echo "probes ($store): crewbus serve at $PROBE_URL (bus.max_wait_ms = $PROBE_MAX_WAIT_MS)"

  # The served document: valid, and its wait_ms maximum is the configured bus.max_wait_ms.
  curl -fsS "$PROBE_URL/openapi.json" -o "$work/openapi.json" || { echo "probes: GET /openapi.json failed" >&2; return 1; }
  "$PROBES_VENV/bin/openapi-spec-validator" --validation-errors all "$work/openapi.json" || failed=1
  local max_wait
  max_wait="$("$PROBE_PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["components"]["schemas"]["FetchRequest"]["properties"]["wait_ms"].get("maximum"))' "$work/openapi.json")"
  if [ "$max_wait" != "$PROBE_MAX_WAIT_MS" ]; then
    echo "probes ($store): the document's wait_ms maximum is $max_wait, not the configured $PROBE_MAX_WAIT_MS" >&2
    failed=1
  fi

  # The run every generated send names, and the conversation (with a message) and run the admin
  # routes are given (probes/schemathesis.toml).
  local run conversation message
  run="$(curl -fsS -X POST -H "Authorization: Bearer $PROBE_TOKEN" "$PROBE_URL/v1/runs" -o "$work/run.json" && json_field "$work/run.json" id)"
  [ -n "$run" ] || { echo "probes: POST /v1/runs failed" >&2; return 1; }
  conversation="$(curl -fsS -X POST -H "Authorization: Bearer $PROBE_TOKEN" -H 'Content-Type: application/json' \
    -d '{"title": "probe", "members": ["bob"]}' "$PROBE_URL/v1/conversations" -o "$work/conversation.json" \
    && json_field "$work/conversation.json" id)"
  [ -n "$conversation" ] || { echo "probes: POST /v1/conversations failed" >&2; return 1; }
  curl -fsS -X POST -H "Authorization: Bearer $PROBE_TOKEN" -H 'Content-Type: application/json' \
    -d "{\"request_id\": \"probe-1\", \"body\": \"hello bob\", \"run\": \"$run\"}" \
    "$PROBE_URL/v1/conversations/$conversation/messages" -o "$work/sent.json" \
    || { echo "probes: the first send failed" >&2; return 1; }
  message="$("$PROBE_PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["message"]["id"])' "$work/sent.json")"
  # The agent's inbox-watch cursor every generated watch passes back (probes/schemathesis.toml).
  local cursor
  cursor="$(curl -fsS -X POST -H "Authorization: Bearer $PROBE_TOKEN" -H 'Content-Type: application/json' \
    -d '{}' "$PROBE_URL/v1/inbox/watch" -o "$work/watch.json" && json_field "$work/watch.json" cursor)"
  [ -n "$cursor" ] || { echo "probes: POST /v1/inbox/watch failed" >&2; return 1; }

  local st=(timeout "$PROBE_RUN_TIMEOUT" env "CREWBUS_PROBE_RUN=$run" "CREWBUS_PROBE_TEAM=$PROBE_TEAM"
    "CREWBUS_PROBE_CONVERSATION=$conversation" "CREWBUS_PROBE_MESSAGE=$message"
    "CREWBUS_PROBE_CURSOR=$cursor"
    "$PROBES_VENV/bin/schemathesis"
    --config-file "$PWD/probes/schemathesis.toml" --no-color run "$PROBE_URL/openapi.json"
    --checks all --seed "$PROBE_SEED" --workers 1 --request-timeout 10
    --generation-database none --warnings off)
  echo "probes ($store): schemathesis --checks all with an agent's token (not /v1/admin), $PROBE_MAX_EXAMPLES examples per operation, seed $PROBE_SEED"
  (cd "$work" && "${st[@]}" --max-examples "$PROBE_MAX_EXAMPLES" --exclude-path-regex '^/v1/admin/' \
    -H "Authorization: Bearer $PROBE_TOKEN") >"$work/schemathesis.log" 2>&1 || failed=1
  show_schemathesis_log "$work/schemathesis.log" "$failed"
  echo "probes ($store): schemathesis --checks all with an operator's token on /v1/admin only, $PROBE_MAX_EXAMPLES examples per operation"
  local admin_failed=0
  (cd "$work" && "${st[@]}" --max-examples "$PROBE_MAX_EXAMPLES" --include-path-regex '^/v1/admin/' \
    -H "Authorization: Bearer $PROBE_OPERATOR_TOKEN") >"$work/schemathesis-admin.log" 2>&1 || admin_failed=1
  show_schemathesis_log "$work/schemathesis-admin.log" "$admin_failed"
  [ "$admin_failed" = 0 ] || failed=1
  echo "probes ($store): schemathesis --checks all without a token, $PROBE_ANON_EXAMPLES examples per operation"
  local anon_failed=0
  (cd "$work" && "${st[@]}" --max-examples "$PROBE_ANON_EXAMPLES") \
    >"$work/schemathesis-anon.log" 2>&1 || anon_failed=1
  show_schemathesis_log "$work/schemathesis-anon.log" "$anon_failed"
  [ "$anon_failed" = 0 ] || failed=1

  # On Postgres, the probes went through the database (sends were stored there).
  if [ "$store" = postgres ]; then
    local stored
    stored="$("${PG_BIN_DIR:+$PG_BIN_DIR/}psql" -X -A -t -d "$PROBE_DATABASE_URL" -c "SELECT count(*) FROM messages")"
    echo "probes ($store): $stored messages stored in the probe's database"
    [ "${stored:-0}" -gt 0 ] || { echo "probes ($store): no message reached the database" >&2; failed=1; }
  fi

  # The server must have lived through it, without a panic.
  if ! kill -0 "$PROBE_PID" 2>/dev/null; then
    echo "probes ($store): crewbus serve died during the probes:" >&2; tail -n 40 "$work/serve.log" >&2; failed=1
  elif grep -q "panicked" "$work/serve.log"; then
    echo "probes ($store): crewbus serve panicked:" >&2; grep -A5 "panicked" "$work/serve.log" >&2; failed=1
  fi
  kill "$PROBE_PID" 2>/dev/null; wait "$PROBE_PID" 2>/dev/null || true
  return "$failed"
}

# Every probe on every store (after setup_postgres). The crewbus binary is CREWBUS_BIN when set
# (scripts/test's MCP step copies its build aside), else the workspace build.
run_probes() {
  step "probes: openapi-spec-validator and schemathesis (.tools/)"
  setup_probe_tools
  if [ -z "${CREWBUS_BIN:-}" ]; then
    step "probes: the crewbus binary"
    cargo build --workspace --all-features --bin crewbus
    local target="${CARGO_TARGET_DIR:-$PWD/target}" bin_dir
    bin_dir="$(mktemp -d /tmp/crewbus-probe-bin-XXXXXX)"
    on_exit "rm -rf '$bin_dir'"
    cp "$target/debug/crewbus" "$bin_dir/crewbus"
    CREWBUS_BIN="$bin_dir/crewbus"
  fi

  local passed=0 failed=() store
  for store in memory sqlite postgres; do
    step "probes on $store: the served OpenAPI document and schemathesis --checks all"
    if probe_store "$store"; then
      passed=$(( passed + 1 ))
    else
      failed+=("$store")
    fi
  done
  echo "probes: $passed passed, ${#failed[@]} failed"
  if [ "${#failed[@]}" -gt 0 ]; then
    printf 'probes FAILED on: %s\n' "${failed[@]}" >&2
    exit 1
  fi
}
