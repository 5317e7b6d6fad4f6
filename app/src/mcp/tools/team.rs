//! The tools about the caller and its team: `whoami`, `list_agents`.

use serde::Serialize;
use utoipa::ToSchema;

use crate::edge::views::TeamAgentView;

/// The agents of the caller's team (`GET /v1/agents`, as an object).
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentsView {
    /// Every agent of the team by name, revoked ones included (with `revoked_at`), each with its
    /// status line, current run and last activity.
    pub agents: Vec<TeamAgentView>,
}
