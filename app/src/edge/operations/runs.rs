//! The runs: `start_run` (`POST /v1/runs`), `get_run`, `resume_run`, `seal_run`,
//! `read_run_records` (`/v1/runs/{id}…`). A run always belongs to the calling agent (identity
//! from the token).

use crewbus_domain::{Agent, BusResult, RunId, Seq, Uuid};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::edge::operation::{
    Body, Effect, Id, Method, NoArguments, Nothing, Operation, Query, Visit,
};
use crate::edge::views::{Outcome, RecordsQuery, RecordsView, RunView, SealRequest};
use crate::usecases::bus::Bus;

pub(crate) fn each(v: &mut impl Visit) {
    v.operation::<StartRun>();
    v.operation::<GetRun>();
    v.operation::<ResumeRun>();
    v.operation::<SealRun>();
    v.operation::<ReadRunRecords>();
}

/// The errors of a route naming one of the caller's runs.
const RUN_ERRORS: [(u16, &str); 3] = [
    (400, ""),
    (403, "another agent's run"),
    (404, "unknown or another team's"),
];

/// `start_run`.
pub(crate) struct StartRun;

impl Operation for StartRun {
    const NAME: &'static str = "start_run";
    const TITLE: &'static str = "Start a run";
    const DESCRIPTION: &'static str = "Starts a run: a journal of this working session (what you \
        sent, were delivered, acknowledged) that the operator receives. Pass its id as `run` to \
        send_message, confirm_deliveries and acknowledge_message, and end it with seal_run. Each \
        call starts a new run. Returns the run.";
    const EFFECT: Effect = Effect::Additive;
    const METHOD: Method = Method::Post;
    const PATH: &'static str = "/v1/runs";
    const STATUS: u16 = 201;
    const TAG: &'static str = "runs";
    const SUMMARY: &'static str = "Admit a run for the caller: `RunAdmitted` is journaled and the \
        operator's push destinations\nare registered for it. If registering fails the run is \
        sealed `failed` and the request fails.";
    const ERRORS: &'static [(u16, &'static str)] = &[(
        503,
        "journal or push store unavailable (a run whose registration failed is sealed failed)",
    )];
    type Http = Nothing;
    type Mcp = NoArguments;
    type Answer = RunView;
    type McpAnswer = RunView;

    fn from_http(Nothing: Nothing) -> BusResult<NoArguments> {
        Ok(NoArguments {})
    }

    async fn run(bus: &Bus, agent: &Agent, NoArguments {}: NoArguments) -> BusResult<RunView> {
        Ok(bus.admit_run(agent).await?.into())
    }
}

/// `get_run`.
pub(crate) struct GetRun;

impl Operation for GetRun {
    const NAME: &'static str = "get_run";
    const TITLE: &'static str = "Get a run";
    const DESCRIPTION: &'static str = "Returns one of your runs (when it started, its last \
        journal record, whether and how it was sealed).";
    const EFFECT: Effect = Effect::ReadOnly;
    const METHOD: Method = Method::Get;
    const PATH: &'static str = "/v1/runs/{id}";
    const ID: &'static str = "run id";
    const TAG: &'static str = "runs";
    const SUMMARY: &'static str = "One of the caller's runs.";
    const ERRORS: &'static [(u16, &'static str)] = &RUN_ERRORS;
    type Http = Id;
    type Mcp = RunArguments;
    type Answer = RunView;
    type McpAnswer = RunView;

    fn from_http(Id(run_id): Id) -> BusResult<RunArguments> {
        Ok(RunArguments { run_id })
    }

    async fn run(bus: &Bus, agent: &Agent, a: RunArguments) -> BusResult<RunView> {
        Ok(bus.run_of(agent, RunId(a.run_id)).await?.into())
    }
}

/// `resume_run`.
pub(crate) struct ResumeRun;

impl Operation for ResumeRun {
    const NAME: &'static str = "resume_run";
    const TITLE: &'static str = "Resume a run";
    const DESCRIPTION: &'static str = "Resumes one of your open runs in a new session (journals \
        that it resumed); a sealed run cannot be resumed (conflict). Returns the run.";
    const EFFECT: Effect = Effect::Additive;
    const METHOD: Method = Method::Post;
    const PATH: &'static str = "/v1/runs/{id}/resume";
    const ID: &'static str = "run id";
    const TAG: &'static str = "runs";
    const SUMMARY: &'static str = "Resume the caller's open run (`RunResumed`); its push \
        registrations are opened again without\nrewinding any receiver's cursor. A registration \
        failure fails the resume.";
    const ERRORS: &'static [(u16, &'static str)] = &[
        RUN_ERRORS[0],
        RUN_ERRORS[1],
        RUN_ERRORS[2],
        (409, "the run is sealed"),
        (503, "journal or push store unavailable"),
    ];
    type Http = Id;
    type Mcp = RunArguments;
    type Answer = RunView;
    type McpAnswer = RunView;

    fn from_http(Id(run_id): Id) -> BusResult<RunArguments> {
        Ok(RunArguments { run_id })
    }

    async fn run(bus: &Bus, agent: &Agent, a: RunArguments) -> BusResult<RunView> {
        Ok(bus.resume_run(agent, RunId(a.run_id)).await?.into())
    }
}

/// `seal_run`.
pub(crate) struct SealRun;

impl Operation for SealRun {
    const NAME: &'static str = "seal_run";
    const TITLE: &'static str = "Seal a run";
    const DESCRIPTION: &'static str = "Ends one of your runs for good with an outcome \
        (`succeeded`, `failed`, `cancelled`) and a reason: nothing can be added to it afterwards \
        and it cannot be resumed. Call it when the session's work is done. Sealing twice is a \
        conflict. Returns the sealed run.";
    const EFFECT: Effect = Effect::Destructive;
    const METHOD: Method = Method::Post;
    const PATH: &'static str = "/v1/runs/{id}/seal";
    const ID: &'static str = "run id";
    const TAG: &'static str = "runs";
    const SUMMARY: &'static str =
        "Seal the caller's run (the terminal record; nothing is appended after it).";
    const ERRORS: &'static [(u16, &'static str)] = &[
        RUN_ERRORS[0],
        RUN_ERRORS[1],
        RUN_ERRORS[2],
        (409, "already sealed"),
    ];
    type Http = (Id, Body<SealRequest>);
    type Mcp = SealArguments;
    type Answer = RunView;
    type McpAnswer = RunView;

    fn from_http((Id(run_id), Body(r)): (Id, Body<SealRequest>)) -> BusResult<SealArguments> {
        Ok(SealArguments {
            run_id,
            outcome: r.outcome,
            reason: r.reason,
        })
    }

    async fn run(bus: &Bus, agent: &Agent, a: SealArguments) -> BusResult<RunView> {
        let run = bus
            .seal_run(agent, RunId(a.run_id), a.outcome.into(), &a.reason)
            .await?;
        Ok(run.into())
    }
}

/// `read_run_records`.
pub(crate) struct ReadRunRecords;

impl Operation for ReadRunRecords {
    const NAME: &'static str = "read_run_records";
    const TITLE: &'static str = "Read a run's journal";
    const DESCRIPTION: &'static str = "Reads a page of one of your runs' journal from `from_seq` \
        (records carry ids, never message bodies); continue from `next_from_seq`.";
    const EFFECT: Effect = Effect::ReadOnly;
    const METHOD: Method = Method::Get;
    const PATH: &'static str = "/v1/runs/{id}/records";
    const ID: &'static str = "run id";
    const TAG: &'static str = "runs";
    const SUMMARY: &'static str = "A page of the caller's run's journal, from `from_seq`.";
    const ERRORS: &'static [(u16, &'static str)] = &RUN_ERRORS;
    type Http = (Id, Query<RecordsQuery>);
    type Mcp = RecordsArguments;
    type Answer = RecordsView;
    type McpAnswer = RecordsView;

    fn from_http((Id(run_id), Query(q)): (Id, Query<RecordsQuery>)) -> BusResult<RecordsArguments> {
        Ok(RecordsArguments {
            run_id,
            from_seq: q.from_seq,
            limit: q.limit,
        })
    }

    async fn run(bus: &Bus, agent: &Agent, a: RecordsArguments) -> BusResult<RecordsView> {
        let records = bus
            .run_records(agent, RunId(a.run_id), Seq(a.from_seq), a.limit)
            .await?;
        Ok(RecordsView::page(records, a.from_seq))
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
    #[serde(default = "default_records_limit")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: usize,
}

fn first_seq() -> u64 {
    1
}

fn default_records_limit() -> usize {
    100
}
