//! The run tools: `start_run`, `get_run`, `resume_run`, `seal_run`, `read_run_records`.

use crewbus_domain::Uuid;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::edge::views::Outcome;
use crate::mcp::views::default_history_limit;

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
