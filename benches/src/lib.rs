//! crewbus benchmarks live in `benches/`; this library holds the load generator they, the fault
//! tests and the `crewbus-load` binary (`src/bin/crewbus-load.rs`) share ([`load`]).

pub mod load;
