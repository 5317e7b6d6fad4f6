//! The presence tool: `set_status` (`list_agents` shows the status lines it sets).

use crewbus_domain::BusResult;

use super::{Call, Declared, Effect, Reply, Tool, declare, reply};
use crate::edge::views::{SetStatus as SetStatusArguments, TeamAgentView};

pub(super) const TOOLS: &[Declared] = &[declare::<SetStatus>()];

/// `set_status`.
struct SetStatus;

impl Tool for SetStatus {
    const NAME: &'static str = "set_status";
    const TITLE: &'static str = "Set my status";
    const DESCRIPTION: &'static str = "Sets your status line: one short line (at most 200 \
        characters) saying what you are doing now, e.g. \"reviewing PR 12\" or \"blocked on the \
        schema review\". Your team sees it beside your name in list_agents and the people running \
        the agents see it in their console. Set it when you start something new; an empty `status` \
        clears it. Returns you as list_agents shows you.";
    const CORE: Option<&'static str> = None;
    const EFFECT: Effect = Effect::Idempotent;
    type Arguments = SetStatusArguments;
    type Answer = TeamAgentView;

    async fn run(call: Call<'_>, a: SetStatusArguments) -> BusResult<Reply<TeamAgentView>> {
        reply(TeamAgentView::from(
            call.bus.set_status(call.agent, &a.status).await?,
        ))
    }
}
