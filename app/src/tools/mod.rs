//! The operator tools: `crewbus load` (the load generator and its zero-loss check) and the HTTP
//! client it, the benches and `app/examples/exchange.rs` use ([`client::ApiClient`], with the one
//! retry rule [`client::transient`]).

pub mod client;
pub mod load;
