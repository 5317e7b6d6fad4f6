//! The admin API, `/v1/admin/…`: what the people who run the agents see and do, over HTTP —
//! teams, agents with their activity, conversations and their messages with every recipient's
//! delivery state, runs and their journals, push registrations with their attempts logs and
//! the parked ones, storage use — and the actions: add and revoke an agent, post as the team's
//! human member, un-park.
//!
//! Authenticated by an operator's bearer token ([`auth::Operator`]; an agent's token is `401`,
//! as an operator's is on the agents' routes). Each handler parses, calls one use case of
//! `usecases::oversight` (the CLI and the console call the same ones) and renders a view of
//! [`views`]. Anything of a team outside the operator's scope is `404`, as an id that does not
//! exist.

use axum::Router;
use axum::routing::{get, post};

use super::AppState;

pub mod auth;
mod conversations;
mod leases;
mod push;
mod runs;
mod storage;
mod teams;
pub mod views;

/// The admin routes, merged into the API's router (its layers and fallbacks apply).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/me", get(teams::me))
        .route("/v1/admin/overview", get(teams::overview))
        .route("/v1/admin/teams", get(teams::teams))
        .route(
            "/v1/admin/teams/{team}/agents",
            get(teams::agents).post(teams::add_agent),
        )
        .route(
            "/v1/admin/teams/{team}/agents/{agent}/revoke",
            post(teams::revoke_agent),
        )
        .route(
            "/v1/admin/teams/{team}/conversations",
            get(conversations::list),
        )
        .route(
            "/v1/admin/teams/{team}/conversations/{conversation}/messages",
            get(conversations::messages).post(conversations::post),
        )
        .route(
            "/v1/admin/teams/{team}/messages/{message}",
            get(conversations::message),
        )
        .route("/v1/admin/teams/{team}/runs", get(runs::list))
        .route(
            "/v1/admin/teams/{team}/runs/{run}/records",
            get(runs::records),
        )
        .route("/v1/admin/teams/{team}/leases", get(leases::list))
        .route(
            "/v1/admin/teams/{team}/leases/{lease}/release",
            post(leases::release),
        )
        .route("/v1/admin/teams/{team}/push", get(push::team))
        .route("/v1/admin/push/parked", get(push::parked))
        .route("/v1/admin/runs/{run}/push/{id}/unpark", post(push::unpark))
        .route("/v1/admin/storage", get(storage::storage))
}

/// The operations of the admin API, for the OpenAPI document.
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        teams::me,
        teams::overview,
        teams::teams,
        teams::agents,
        teams::add_agent,
        teams::revoke_agent,
        conversations::list,
        conversations::messages,
        conversations::post,
        conversations::message,
        runs::list,
        runs::records,
        leases::list,
        leases::release,
        push::team,
        push::parked,
        push::unpark,
        storage::storage,
    ),
    components(schemas(
        views::OperatorView,
        views::TeamView,
        views::BucketView,
        views::TeamOverviewView,
        views::AdminAgentView,
        views::AgentActivityView,
        views::AddAgent,
        views::NewAgentView,
        views::MemberView,
        views::AdminConversationView,
        views::RecipientStateName,
        views::RecipientView,
        views::AdminMessageView,
        views::AdminMessagesView,
        views::PostMessage,
        views::RunRecordsView,
        views::PushAttemptView,
        views::PushRegistrationView,
        views::RunPushView,
        views::UnparkedView,
        views::StorageUseView,
        views::StreamKindName,
        views::StreamUseView,
        views::TeamStorageView
    ))
)]
pub(crate) struct AdminDoc;
