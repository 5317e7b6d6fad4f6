//! The admin API's request and response bodies (JSON), documented in `/openapi.json` under the
//! tag `admin`. Never a token hash or a push credential: an agent's token appears once, in the
//! answer that created it; a push registration shows its authentication scheme only and its URL
//! without userinfo or query ([`crewbus_domain::redact_url`]).
//!
//! Times are RFC 3339 in UTC; ages are whole seconds; sizes are bytes; counts are counts.

use crewbus_domain::{
    ActivityBucket, Agent, AgentActivity, AttemptOutcome, DateTime, DeliveryState, Operator,
    OperatorScope, PushAttempt, RecipientState, StorageUse, StreamKind, Team, Utc, Uuid,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::edge::views::{HistoryItemView, MemberKind, MessageView, RecordView, RunView};
use crate::usecases::oversight::{
    AdminMessage, AdminPage, ConversationList, Members, RegistrationView, RunPush, StreamUse,
    TeamOverview, TeamStorage,
};

/// Whole seconds from `then` to `now` (0 when `then` is later).
fn age_seconds(then: DateTime<Utc>, now: DateTime<Utc>) -> u64 {
    u64::try_from((now - then).num_seconds()).unwrap_or(0)
}

/// The calling operator (never its token or the token's hash).
#[derive(Debug, Serialize, ToSchema)]
pub struct OperatorView {
    /// Operator id.
    pub id: Uuid,
    /// Name, unique in the deployment.
    pub name: String,
    /// The team ids it may see and act on; `null`: every team, present and future.
    pub teams: Option<Vec<Uuid>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

impl From<Operator> for OperatorView {
    fn from(o: Operator) -> Self {
        OperatorView {
            id: o.id,
            name: o.name,
            teams: match o.scope {
                OperatorScope::Everything => None,
                OperatorScope::Teams(teams) => Some(teams.into_iter().collect()),
            },
            created_at: o.created_at,
        }
    }
}

/// A team.
#[derive(Debug, Serialize, ToSchema)]
pub struct TeamView {
    /// Team id (what the `{team}` of the admin paths takes).
    pub id: Uuid,
    /// Display name, unique in the deployment.
    pub name: String,
    /// The body backend new conversations of the team use (`sqlite`, `postgres`, `jetstream`,
    /// `memory`).
    pub body_backend: String,
    /// The inbox backend of the team's references.
    pub inbox: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

impl From<Team> for TeamView {
    fn from(t: Team) -> Self {
        TeamView {
            id: t.id,
            name: t.name,
            body_backend: t.body_backend,
            inbox: t.inbox,
            created_at: t.created_at,
        }
    }
}

/// Sends and confirmed deliveries of one team within one minute.
#[derive(Debug, Serialize, ToSchema)]
pub struct BucketView {
    /// Start of the minute (inclusive; it ends 60 seconds later, exclusive).
    pub start: DateTime<Utc>,
    /// Messages sent in it (count).
    pub sent: u64,
    /// Deliveries confirmed in it (count).
    pub delivered: u64,
}

impl From<ActivityBucket> for BucketView {
    fn from(b: ActivityBucket) -> Self {
        BucketView {
            start: b.start,
            sent: b.sent,
            delivered: b.delivered,
        }
    }
}

/// One team at a glance.
#[derive(Debug, Serialize, ToSchema)]
pub struct TeamOverviewView {
    /// The team.
    pub team: TeamView,
    /// Messages sent and deliveries confirmed per minute over the last hour, oldest first,
    /// zero-filled: 61 buckets, the last one the current (partly elapsed) minute.
    pub series: Vec<BucketView>,
    /// Deliveries pending: receipts of stored messages not yet confirmed, over every agent
    /// (count).
    pub pending: u64,
    /// When the oldest pending delivery was stored; `null` when nothing is pending.
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// How long ago that was, whole seconds; `null` when nothing is pending.
    pub oldest_pending_age_seconds: Option<u64>,
    /// Parked (dead-lettered) push registrations of the team's runs (count).
    pub parked: u64,
    /// Agents of the team, revoked ones and human members included (count).
    pub agents: u64,
    /// Active agents: neither revoked nor human members (count).
    pub active_agents: u64,
}

impl TeamOverviewView {
    /// The overview of one team, ages counted to `now`.
    pub fn new(o: TeamOverview, now: DateTime<Utc>) -> Self {
        TeamOverviewView {
            team: o.team.into(),
            series: o.series.into_iter().map(Into::into).collect(),
            pending: o.pending,
            oldest_pending_at: o.oldest_pending_at,
            oldest_pending_age_seconds: o.oldest_pending_at.map(|t| age_seconds(t, now)),
            parked: o.parked as u64,
            agents: o.agents as u64,
            active_agents: o.active_agents as u64,
        }
    }
}

/// An agent of a team as recorded (never its token or the token's hash).
#[derive(Debug, Serialize, ToSchema)]
pub struct AdminAgentView {
    /// Agent id.
    pub id: Uuid,
    /// Team id.
    pub team: Uuid,
    /// Name, unique in the team.
    pub name: String,
    /// `agent`, or `human`: the team's human member an operator posts as.
    pub kind: MemberKind,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked; `null` while active.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<Agent> for AdminAgentView {
    fn from(a: Agent) -> Self {
        AdminAgentView {
            id: a.id,
            team: a.team,
            name: a.name,
            kind: a.kind.into(),
            created_at: a.created_at,
            revoked_at: a.revoked_at,
        }
    }
}

/// An agent with its activity and backlog.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentActivityView {
    /// Agent id.
    pub id: Uuid,
    /// Team id.
    pub team: Uuid,
    /// Name, unique in the team.
    pub name: String,
    /// `agent`, or `human`: the team's human member an operator posts as.
    pub kind: MemberKind,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked; `null` while active.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Its last authenticated call (recorded at most once per few seconds, so up to that much
    /// behind); `null` when none was recorded.
    pub last_active_at: Option<DateTime<Utc>>,
    /// Deliveries pending for it: receipts of stored messages not yet confirmed (count).
    pub pending: u64,
    /// When the oldest of those was stored; `null` when nothing is pending.
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// The age of its oldest unconfirmed delivery, whole seconds; `null` when nothing is
    /// pending.
    pub oldest_pending_age_seconds: Option<u64>,
}

impl AgentActivityView {
    /// One agent's activity, ages counted to `now`.
    pub fn new(a: AgentActivity, now: DateTime<Utc>) -> Self {
        AgentActivityView {
            id: a.agent.id,
            team: a.agent.team,
            name: a.agent.name,
            kind: a.agent.kind.into(),
            created_at: a.agent.created_at,
            revoked_at: a.agent.revoked_at,
            last_active_at: a.last_active_at,
            pending: a.pending,
            oldest_pending_at: a.oldest_pending_at,
            oldest_pending_age_seconds: a.oldest_pending_at.map(|t| age_seconds(t, now)),
        }
    }
}

/// Add an agent to a team.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddAgent {
    /// The agent's name, unique in the team: 1 to 128 ASCII letters, digits, `_` and `-`.
    // `crewbus_domain::validate_recipient_key`'s rule (a test holds them together).
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$")]
    pub name: String,
}

/// An agent just added, with its bearer token: the only time the token is shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewAgentView {
    /// The agent as recorded.
    pub agent: AdminAgentView,
    /// Its bearer token (`cbt_` and 64 hex digits). Store it now: only its hash is kept.
    pub token: String,
}

/// A member of a conversation.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberView {
    /// Agent id.
    pub id: Uuid,
    /// Its name (empty when the team no longer names it).
    pub name: String,
    /// `agent`, or `human`: the team's human member an operator posts as.
    pub kind: MemberKind,
}

impl MemberView {
    fn of(id: Uuid, members: &Members) -> Self {
        match members.get(id) {
            Some(a) => MemberView {
                id,
                name: a.name.clone(),
                kind: a.kind.into(),
            },
            None => MemberView {
                id,
                name: String::new(),
                kind: MemberKind::Agent,
            },
        }
    }
}

/// A conversation with its members and how much it holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct AdminConversationView {
    /// Conversation id.
    pub id: Uuid,
    /// Title.
    pub title: String,
    /// The body backend it was created with (kept for life).
    pub backend: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Its members, in the order they joined.
    pub members: Vec<MemberView>,
    /// Messages recorded in it, every publication state (count).
    pub messages: u64,
    /// When its latest message was sent; `null` while empty.
    pub last_sent_at: Option<DateTime<Utc>>,
}

impl AdminConversationView {
    /// Every conversation of `list`, members named.
    pub fn list(list: ConversationList) -> Vec<Self> {
        let members = list.members;
        list.conversations
            .into_iter()
            .map(|s| AdminConversationView {
                id: s.conversation.id,
                title: s.conversation.title,
                backend: s.conversation.backend,
                created_at: s.conversation.created_at,
                members: s
                    .conversation
                    .members
                    .iter()
                    .map(|m| MemberView::of(m.agent, &members))
                    .collect(),
                messages: s.messages,
                last_sent_at: s.last_sent_at,
            })
            .collect()
    }
}

/// Where one recipient's copy of a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecipientStateName {
    /// The body is not stored yet (the outbox holds it), or its publication failed.
    Pending,
    /// Stored and waiting for the recipient to fetch it.
    Stored,
    /// Handed out to the recipient (fetched), not yet confirmed.
    HandedOut,
    /// Confirmed: the recipient's receipt is committed.
    Confirmed,
    /// Confirmed and acknowledged as read.
    Acknowledged,
}

impl From<DeliveryState> for RecipientStateName {
    fn from(s: DeliveryState) -> Self {
        match s {
            DeliveryState::Pending => RecipientStateName::Pending,
            DeliveryState::Stored => RecipientStateName::Stored,
            DeliveryState::HandedOut => RecipientStateName::HandedOut,
            DeliveryState::Confirmed => RecipientStateName::Confirmed,
            DeliveryState::Acknowledged => RecipientStateName::Acknowledged,
        }
    }
}

/// One recipient of a message: its receipt and the hand-outs made of it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecipientView {
    /// Recipient agent id.
    pub recipient: Uuid,
    /// Its name (empty when the team no longer names it).
    pub name: String,
    /// Where its copy stands: `pending`, `stored`, `handed_out`, `confirmed`, `acknowledged`.
    pub state: RecipientStateName,
    /// When the body was stored.
    pub stored_at: Option<DateTime<Utc>>,
    /// When the recipient confirmed delivery (set once).
    pub delivered_at: Option<DateTime<Utc>>,
    /// When the recipient acknowledged reading it (set once).
    pub acknowledged_at: Option<DateTime<Utc>>,
    /// Hand-outs of the message to it so far (count; more than one: redelivered before the
    /// confirm).
    pub hand_outs: u32,
    /// When the latest hand-out was issued.
    pub last_handed_out_at: Option<DateTime<Utc>>,
}

impl RecipientView {
    fn of(r: RecipientState, members: &Members) -> Self {
        RecipientView {
            recipient: r.receipt.recipient,
            name: members
                .get(r.receipt.recipient)
                .map(|a| a.name.clone())
                .unwrap_or_default(),
            state: r.state().into(),
            stored_at: r.receipt.stored_at,
            delivered_at: r.receipt.delivered_at,
            acknowledged_at: r.receipt.acknowledged_at,
            hand_outs: r.hand_outs,
            last_handed_out_at: r.last_handed_out_at,
        }
    }
}

/// One message as an operator sees it: the message, its body or why there is none, its
/// sender's name, and where every recipient's copy stands.
#[derive(Debug, Serialize, ToSchema)]
pub struct AdminMessageView {
    /// The message (`message.sender_kind` says whether a person posted it).
    pub message: MessageView,
    /// The sender's name (empty when the team no longer names it).
    pub sender_name: String,
    /// Its whole body, when it could be read.
    pub body: Option<String>,
    /// Why there is no body: `pending` (a page stops here; read again from `next_after_seq`),
    /// `failed`, `retained`, `unavailable` (the backend did not answer), `missing`.
    pub absence: Option<String>,
    /// One per recipient (every member but the sender, human members excepted), by
    /// recipient key.
    pub recipients: Vec<RecipientView>,
}

impl AdminMessageView {
    fn of(m: AdminMessage, members: &Members) -> Self {
        let sender_name = members
            .get(m.entry.message.sender)
            .map(|a| a.name.clone())
            .unwrap_or_default();
        let item = HistoryItemView::from(m.entry);
        AdminMessageView {
            message: item.message,
            sender_name,
            body: item.body,
            absence: item.absence,
            recipients: m
                .recipients
                .into_iter()
                .map(|r| RecipientView::of(r, members))
                .collect(),
        }
    }

    /// The one message of `page` (an [`AdminPage`] of one, as `Bus::admin_message_page`
    /// answers), or `None`.
    pub fn single(page: AdminPage) -> Option<Self> {
        let members = page.members;
        page.messages
            .into_iter()
            .next()
            .map(|m| AdminMessageView::of(m, &members))
    }
}

/// A page of a conversation's messages.
#[derive(Debug, Serialize, ToSchema)]
pub struct AdminMessagesView {
    /// Messages in `seq` order, up to and including the first pending one.
    pub messages: Vec<AdminMessageView>,
    /// Pass as `after_seq` for the next page.
    pub next_after_seq: u64,
}

impl From<AdminPage> for AdminMessagesView {
    fn from(page: AdminPage) -> Self {
        let members = page.members;
        AdminMessagesView {
            messages: page
                .messages
                .into_iter()
                .map(|m| AdminMessageView::of(m, &members))
                .collect(),
            next_after_seq: page.next_after_seq,
        }
    }
}

/// Post into a conversation as the operator's human member of the team.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    /// The caller's idempotency key (1 to 128 visible ASCII characters): the same key with the
    /// same body returns the original message; with another body it is `409 conflict`.
    // `crewbus_domain::validate_request_id`'s rule, as `SendMessage`'s.
    #[schema(min_length = 1, max_length = 128, pattern = "^[!-~]+$")]
    pub request_id: String,
    /// The body (UTF-8, at most the team backend's limit, 1 MiB by default; larger is 413).
    pub body: String,
}

/// A page of a team's runs (the query string).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// Only runs admitted before this instant (RFC 3339); the next page passes the last run's
    /// `admitted_at`. Default: the newest runs.
    #[serde(default)]
    pub before: Option<DateTime<Utc>>,
    /// At most this many (1 to 1000). Default 100.
    #[serde(default = "default_limit")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: usize,
}

fn default_limit() -> usize {
    100
}

/// A run with a page of its journal.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunRecordsView {
    /// The run.
    pub run: RunView,
    /// Up to `limit` records from `from_seq`, ascending by `seq`.
    pub records: Vec<RecordView>,
    /// `from_seq` for the next page.
    pub next_from_seq: u64,
}

/// Which runs' push registrations (the query string).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PushQuery {
    /// The newest this many runs of the team (1 to 100). Default 20.
    #[serde(default = "default_push_runs")]
    #[param(minimum = 1, maximum = 100)]
    pub runs: usize,
}

fn default_push_runs() -> usize {
    20
}

/// One delivery attempt of a push registration.
#[derive(Debug, Serialize, ToSchema)]
pub struct PushAttemptView {
    /// When the POST started.
    pub at: DateTime<Utc>,
    /// The journal record it carried (seq).
    pub seq: u64,
    /// The receiver's HTTP status; `null` when there was no answer (see `error`).
    pub status: Option<u16>,
    /// Why there was no answer (a timeout, a refused connection; bus-written text, never a
    /// credential or the URL); `null` when the receiver answered.
    pub error: Option<String>,
    /// Whether it acknowledged its record (a 2xx answer).
    pub acknowledged: bool,
    /// From the start of the POST to the answer or the error, milliseconds.
    pub duration_ms: u64,
}

impl From<PushAttempt> for PushAttemptView {
    fn from(a: PushAttempt) -> Self {
        let acknowledged = a.outcome.acknowledged();
        let (status, error) = match a.outcome {
            AttemptOutcome::Status { status } => (Some(status), None),
            AttemptOutcome::Error { error } => (None, Some(error)),
        };
        PushAttemptView {
            at: a.at,
            seq: a.seq.0,
            status,
            error,
            acknowledged,
            duration_ms: a.duration_ms,
        }
    }
}

/// A push registration (one destination of one run) with its delivery state and attempts log.
/// Never a credential: `authentication` is the scheme only, `url` has no userinfo or query.
#[derive(Debug, Serialize, ToSchema)]
pub struct PushRegistrationView {
    /// The run whose journal is pushed.
    pub run: Uuid,
    /// The run's team.
    pub team: Uuid,
    /// Registration id: `operator:<destination name>`.
    pub id: String,
    /// Where it POSTs, without userinfo, query or fragment.
    pub url: String,
    /// The `Authorization` scheme it sends (`Bearer`…), or `null`; never the credential.
    pub authentication: Option<String>,
    /// Its cursor: the first journal record (seq) not yet acknowledged by the receiver.
    pub next_seq: u64,
    /// Failed attempts since the cursor last moved (count).
    pub attempts: u32,
    /// When it is next due (a parked registration waits for an un-park).
    pub next_attempt_at: DateTime<Utc>,
    /// Why the last attempt failed (bus-written; never a credential), or why it was parked.
    pub last_error: Option<String>,
    /// Parked (dead-lettered): no delivery until un-parked
    /// (`POST /v1/admin/runs/{run}/push/{id}/unpark`).
    pub parked: bool,
    /// Its newest delivery attempts, newest first (at most 20).
    pub attempts_log: Vec<PushAttemptView>,
}

impl From<RegistrationView> for PushRegistrationView {
    fn from(v: RegistrationView) -> Self {
        let r = v.registration;
        PushRegistrationView {
            run: r.config.run.0,
            team: v.team,
            id: r.config.id,
            url: crewbus_domain::redact_url(&r.config.url),
            authentication: r.config.authentication.map(|a| a.scheme),
            next_seq: r.next_seq.0,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at,
            last_error: r.last_error,
            parked: r.parked,
            attempts_log: v.attempts.into_iter().map(Into::into).collect(),
        }
    }
}

/// One run with its push registrations.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunPushView {
    /// The run.
    pub run: RunView,
    /// Its registrations (none once every destination acknowledged its terminal record).
    pub registrations: Vec<PushRegistrationView>,
}

impl From<RunPush> for RunPushView {
    fn from(p: RunPush) -> Self {
        RunPushView {
            run: p.run.into(),
            registrations: p.registrations.into_iter().map(Into::into).collect(),
        }
    }
}

/// The answer to an un-park.
#[derive(Debug, Serialize, ToSchema)]
pub struct UnparkedView {
    /// Always `true`: the registration is due now and resumes from its cursor (no parked
    /// registration is `404`).
    pub unparked: bool,
}

/// The bodies a team keeps on one body backend, as the ledger counts them.
#[derive(Debug, Serialize, ToSchema)]
pub struct StorageUseView {
    /// The body backend.
    pub backend: String,
    /// Messages whose body is stored and not yet removed by retention (count).
    pub messages: u64,
    /// Their bodies' total length, bytes.
    pub bytes: u64,
    /// Messages still waiting for the outbox to store their body (count).
    pub pending: u64,
}

impl From<StorageUse> for StorageUseView {
    fn from(u: StorageUse) -> Self {
        StorageUseView {
            backend: u.backend,
            messages: u.messages,
            bytes: u.bytes,
            pending: u.pending,
        }
    }
}

/// Which of a team's broker streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StreamKindName {
    /// The body stream.
    Bodies,
    /// The inbox stream.
    Inbox,
}

/// One JetStream stream of a team: its quotas and what it holds, as the broker reports them.
#[derive(Debug, Serialize, ToSchema)]
pub struct StreamUseView {
    /// `bodies` or `inbox`.
    pub kind: StreamKindName,
    /// Most messages it keeps (count).
    pub max_messages: u64,
    /// Most bytes it keeps (bytes).
    pub max_bytes: u64,
    /// Messages it holds (count).
    pub messages: u64,
    /// Bytes it holds (bytes).
    pub bytes: u64,
}

impl From<StreamUse> for StreamUseView {
    fn from(s: StreamUse) -> Self {
        StreamUseView {
            kind: match s.kind {
                StreamKind::Bodies => StreamKindName::Bodies,
                StreamKind::Inbox => StreamKindName::Inbox,
            },
            max_messages: s.limits.max_messages,
            max_bytes: s.limits.max_bytes,
            messages: s.messages,
            bytes: s.bytes,
        }
    }
}

/// What one team keeps.
#[derive(Debug, Serialize, ToSchema)]
pub struct TeamStorageView {
    /// The team.
    pub team: TeamView,
    /// Per body backend: stored bodies, their bytes, pending publications.
    pub backends: Vec<StorageUseView>,
    /// The team's JetStream streams against their quotas (empty without a broker, when the
    /// team has no streams, or when the broker did not answer).
    pub streams: Vec<StreamUseView>,
}

impl From<TeamStorage> for TeamStorageView {
    fn from(s: TeamStorage) -> Self {
        TeamStorageView {
            team: s.team.into(),
            backends: s.uses.into_iter().map(Into::into).collect(),
            streams: s.streams.into_iter().map(Into::into).collect(),
        }
    }
}
