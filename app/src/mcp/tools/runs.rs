//! The run tools: `start_run`, `get_run`, `resume_run`, `seal_run`, `read_run_records`.

use crewbus_domain::{BusResult, RunId, Seq, Uuid};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{Call, Declared, Effect, Reply, Tool, declare, reply};
use crate::edge::views::{Outcome, RecordsView, RunView};
use crate::mcp::views::{NoArguments, default_history_limit};

pub(super) const TOOLS: &[Declared] = &[
    declare::<StartRun>(),
    declare::<GetRun>(),
    declare::<ResumeRun>(),
    declare::<SealRun>(),
    declare::<ReadRunRecords>(),
];

/// `start_run`.
struct StartRun;

impl Tool for StartRun {
    const NAME: &'static str = "start_run";
    const TITLE: &'static str = "Start a run";
    const DESCRIPTION: &'static str = "Starts a run: a journal of this working session (what you \
        sent, were delivered, acknowledged) that the operator receives. Pass its id as `run` to \
        send_message, confirm_deliveries and acknowledge_message, and end it with seal_run. Each \
        call starts a new run. Returns the run.";
    const CORE: Option<&'static str> = None;
    const EFFECT: Effect = Effect::Additive;
    type Arguments = NoArguments;
    type Answer = RunView;

    async fn run(call: Call<'_>, NoArguments {}: NoArguments) -> BusResult<Reply<RunView>> {
        reply(RunView::from(call.bus.admit_run(call.agent).await?))
    }
}

/// `get_run`.
struct GetRun;

impl Tool for GetRun {
    const NAME: &'static str = "get_run";
    const TITLE: &'static str = "Get a run";
    const DESCRIPTION: &'static str = "Returns one of your runs (when it started, its last \
        journal record, whether and how it was sealed).";
    const CORE: Option<&'static str> = None;
    const EFFECT: Effect = Effect::ReadOnly;
    type Arguments = RunArguments;
    type Answer = RunView;

    async fn run(call: Call<'_>, a: RunArguments) -> BusResult<Reply<RunView>> {
        reply(RunView::from(
            call.bus.run_of(call.agent, RunId(a.run_id)).await?,
        ))
    }
}

/// `resume_run`.
struct ResumeRun;

impl Tool for ResumeRun {
    const NAME: &'static str = "resume_run";
    const TITLE: &'static str = "Resume a run";
    const DESCRIPTION: &'static str = "Resumes one of your open runs in a new session (journals \
        that it resumed); a sealed run cannot be resumed (conflict). Returns the run.";
    const CORE: Option<&'static str> = None;
    const EFFECT: Effect = Effect::Additive;
    type Arguments = RunArguments;
    type Answer = RunView;

    async fn run(call: Call<'_>, a: RunArguments) -> BusResult<Reply<RunView>> {
        reply(RunView::from(
            call.bus.resume_run(call.agent, RunId(a.run_id)).await?,
        ))
    }
}

/// `seal_run`.
struct SealRun;

impl Tool for SealRun {
    const NAME: &'static str = "seal_run";
    const TITLE: &'static str = "Seal a run";
    const DESCRIPTION: &'static str = "Ends one of your runs for good with an outcome \
        (`succeeded`, `failed`, `cancelled`) and a reason: nothing can be added to it afterwards \
        and it cannot be resumed. Call it when the session's work is done. Sealing twice is a \
        conflict. Returns the sealed run.";
    const CORE: Option<&'static str> = None;
    const EFFECT: Effect = Effect::Destructive;
    type Arguments = SealArguments;
    type Answer = RunView;

    async fn run(call: Call<'_>, a: SealArguments) -> BusResult<Reply<RunView>> {
        let run = call
            .bus
            .seal_run(call.agent, RunId(a.run_id), a.outcome.into(), &a.reason)
            .await?;
        reply(RunView::from(run))
    }
}

/// `read_run_records`.
struct ReadRunRecords;

impl Tool for ReadRunRecords {
    const NAME: &'static str = "read_run_records";
    const TITLE: &'static str = "Read a run's journal";
    const DESCRIPTION: &'static str = "Reads a page of one of your runs' journal from `from_seq` \
        (records carry ids, never message bodies); continue from `next_from_seq`.";
    const CORE: Option<&'static str> = None;
    const EFFECT: Effect = Effect::ReadOnly;
    type Arguments = RecordsArguments;
    type Answer = RecordsView;

    async fn run(call: Call<'_>, a: RecordsArguments) -> BusResult<Reply<RecordsView>> {
        let records = call
            .bus
            .run_records(call.agent, RunId(a.run_id), Seq(a.from_seq), a.limit)
            .await?;
        reply(RecordsView::page(records, a.from_seq))
    }
}

/// One of the caller's runs, by id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArguments {
    /// The run id (from `start_run`).
    pub run_id: Uuid,
}

/// `seal_run`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SealArguments {
    /// The run id (from `start_run`).
    pub run_id: Uuid,
    /// How the run ended.
    pub outcome: Outcome,
    /// Why, in the agent's words (at most 16 KiB). Default empty.
    #[serde(default)]
    pub reason: String,
}

/// `read_run_records`' arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordsArguments {
    /// The run id (from `start_run`).
    pub run_id: Uuid,
    /// The first record to return (records are numbered from 1). Default 1.
    #[serde(default = "first_seq")]
    #[schema(minimum = 1)]
    pub from_seq: u64,
    /// At most this many (1 to 1000). Default 100.
    #[serde(default = "default_history_limit")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: usize,
}

fn first_seq() -> u64 {
    1
}
