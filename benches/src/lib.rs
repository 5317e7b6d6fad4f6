//! crewbus benchmarks live in `benches/`; this library holds the load generator they, the fault
//! tests and the `crewbus-load` binary (`src/bin/crewbus-load.rs`) share ([`load`]), and, with
//! the feature `kit`, the test kit the app's tests and the benches share ([`kit`]).

#[cfg(feature = "kit")]
pub mod kit;
pub mod load;
