//! The HTTP API (axum): agents' routes, `/health`, `/metrics`, `/openapi.json`.

pub mod error;
pub(crate) mod extract;
