//! What the two driving edges — the HTTP API ([`crate::http`]) and the MCP endpoint
//! ([`crate::mcp`]) — share, so that neither imports the other: the request and answer types
//! ([`views`], [`leases`], [`search`]), the error body and the status of each error ([`error`]),
//! reading the bearer token (`auth`), the request size limit (`body_limit`) and the
//! listener-wide `Host`/`Origin` check ([`allow`]), the one check for `/v1`, `/mcp` and the
//! console (rmcp's own is off).
//!
//! Nothing here imports `http` or `mcp`.

pub mod allow;
pub(crate) mod auth;
pub(crate) mod body_limit;
pub mod error;
pub(crate) mod fields;
pub mod leases;
pub(crate) mod operation;
pub(crate) mod operations;
pub mod search;
pub mod views;
