# The load generator's command line, for the scripts that drive a crewbus server with it.
# `crewbus-load` is a binary of benches/ (benches/src/bin/crewbus-load.rs); a crewbus binary
# built before it moved there (a BENCH_BIN of an older commit) carries it as `crewbus load`.
#
# load_command [BIN]: sets LOAD, an array to call as "${LOAD[@]}" --config C --json --url …
# (the options of `crewbus-load --help`): BIN's own `crewbus load` when BIN has one (the load
# opens the server's store to create its teams, and a newer build would migrate it under an
# older server), else this tree's release `crewbus-load`, built here when it is not up to date.
load_command() {
  if [ -n "${1:-}" ] && "$1" load --help >/dev/null 2>&1; then
    LOAD=("$1" load)
    return
  fi
  cargo build -q --release -p crewbus-benches --bin crewbus-load
  LOAD=("${CARGO_TARGET_DIR:-$PWD/target}/release/crewbus-load")
}
