//! `set_status` (`PUT /v1/me/status`); `list_agents` shows the status lines it sets.

use crewbus_domain::{Agent, BusResult};

use crate::edge::operation::{Body, Effect, Method, Operation, Visit};
use crate::edge::views::{SetStatus as SetStatusArguments, TeamAgentView};
use crate::usecases::bus::Bus;

pub(crate) fn each(v: &mut impl Visit) {
    v.operation::<SetStatus>();
}

/// `set_status`.
pub(crate) struct SetStatus;

impl Operation for SetStatus {
    const NAME: &'static str = "set_status";
    const TITLE: &'static str = "Set my status";
    const DESCRIPTION: &'static str = "Sets your status line: one short line (at most 200 \
        characters) saying what you are doing now, e.g. \"reviewing PR 12\" or \"blocked on the \
        schema review\". Your team sees it beside your name in list_agents and the people running \
        the agents see it in their console. Set it when you start something new; an empty `status` \
        clears it. Returns you as list_agents shows you.";
    const EFFECT: Effect = Effect::Idempotent;
    const METHOD: Method = Method::Put;
    const PATH: &'static str = "/v1/me/status";
    const TAG: &'static str = "agents";
    const SUMMARY: &'static str = "Sets the caller's status line (what it is doing, shown beside \
        it wherever the team's agents\nare listed); the empty string clears it. Answers the \
        caller as `GET /v1/agents` lists it.";
    const ERRORS: &'static [(u16, &'static str)] = &[
        (400, "over 200 characters, or a control character"),
        (403, "the agent was revoked meanwhile"),
    ];
    type Http = Body<SetStatusArguments>;
    type Mcp = SetStatusArguments;
    type Answer = TeamAgentView;
    type McpAnswer = TeamAgentView;

    fn from_http(Body(a): Body<SetStatusArguments>) -> BusResult<SetStatusArguments> {
        Ok(a)
    }

    async fn run(bus: &Bus, agent: &Agent, a: SetStatusArguments) -> BusResult<TeamAgentView> {
        Ok(bus.set_status(agent, &a.status).await?.into())
    }
}
