//! crewbus application: use cases, workers, HTTP API, CLI and the composition root. Built in the
//! bus application issue; nothing is exported yet.
pub mod push;
