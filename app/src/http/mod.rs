//! The HTTP API (axum): agents' routes under `/v1`, the admin API under `/v1/admin` (an
//! operator's token, [`admin`]), `/health`, `/metrics`, `/openapi.json`, and
//! whatever the server mounts beside them on the same listener (the MCP endpoint `/mcp`, see
//! [`crate::server`]).
//! Errors are JSON `{code, message}` (see [`crate::edge::error`]); the request and answer types
//! are the edge's ([`crate::edge`]), shared with the MCP endpoint.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::edge::allow;
use crate::edge::body_limit::{REQUEST_LIMIT_BYTES, refuse_declared_oversize};
use crate::usecases::bus::Bus;

pub mod admin;
pub(crate) mod auth;
pub(crate) mod body_deadline;
mod conversations;
pub(crate) mod extract;
pub(crate) mod held_answer;
mod inbox;
pub mod leases;
mod messages;
pub mod openapi;
mod operations;
mod ops;
pub(crate) mod request_deadline;
#[cfg(test)]
mod surface;
pub mod watch;

/// What every handler sees.
#[derive(Clone)]
pub struct AppState {
    /// The use cases.
    pub bus: Bus,
}

/// The whole API, with `mounted` (routes served beside the API's own, e.g. the MCP endpoint)
/// merged in before the fallbacks and layers, so the body limit, the declared-size check and the
/// body deadline apply to them too.
pub fn router(bus: Bus, mounted: Router<AppState>) -> Router {
    let body_timeout = bus.settings.request_body_timeout;
    let allow_list = bus.settings.allow.clone();
    // Every route of the API answers within `bus.request_timeout_ms` of its body's end; a fetch
    // within that plus its longest wait (see `request_deadline`).
    let deadline = |extra| request_deadline::Deadline {
        bus: bus.clone(),
        extra,
    };
    let fetch_wait = bus
        .settings
        .max_wait
        .max(crate::usecases::deliver::ROOM_WAIT_MIN);
    // The routes that may wait (`wait_ms`): a fetch, a watch, and an acquire (its listing
    // shares the path, so the same bound).
    let fetch = Router::new()
        .route("/v1/inbox/fetch", post(inbox::fetch))
        .route("/v1/inbox/watch", post(watch::watch))
        .route("/v1/leases", post(leases::acquire).get(leases::list))
        .route_layer(axum::middleware::from_fn_with_state(
            deadline(fetch_wait),
            request_deadline::enforce,
        ));
    let api = operations::routes()
        .route(
            "/v1/conversations",
            post(conversations::create).get(conversations::list),
        )
        .route("/v1/conversations/{id}", get(conversations::get))
        .route(
            "/v1/conversations/{id}/messages",
            post(conversations::send).get(conversations::history),
        )
        .route("/v1/messages/{id}/receipts", get(messages::receipts))
        .route("/v1/messages/{id}/acknowledge", post(messages::acknowledge))
        .route("/v1/inbox/confirm", post(inbox::confirm))
        .route("/v1/inbox/status", get(inbox::status))
        .route("/v1/leases/check", post(leases::check))
        .route("/v1/leases/{id}", get(leases::get))
        .route("/v1/leases/{id}/renew", post(leases::renew))
        .route("/v1/leases/{id}/release", post(leases::release))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(ops::openapi))
        .merge(admin::routes())
        .route_layer(axum::middleware::from_fn_with_state(
            deadline(std::time::Duration::ZERO),
            request_deadline::enforce,
        ));
    api.merge(fetch)
        // `/health` bounds itself (`bus.health_timeout_ms`) and reports what did not answer.
        .route("/health", get(ops::health))
        .merge(mounted)
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .layer(DefaultBodyLimit::max(REQUEST_LIMIT_BYTES))
        .layer(axum::middleware::from_fn(refuse_declared_oversize))
        // Every route: one Host, loopback or configured; no foreign Origin.
        .layer(axum::middleware::from_fn_with_state(
            allow_list,
            allow::check,
        ))
        // Outermost: the body deadline counts from the moment the request head was read.
        .layer(axum::middleware::from_fn_with_state(
            body_timeout,
            body_deadline::enforce,
        ))
        .with_state(AppState { bus })
}
