//! The operator tools: `crewbus load` (the load generator and its zero-loss check), `crewbus
//! demo` (three agents and a signed push receiver), and the HTTP client they share
//! ([`client::ApiClient`], with the one retry rule [`client::transient`]).

pub mod client;
pub mod demo;
mod demo_receiver;
pub mod load;
