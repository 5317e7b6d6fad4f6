//! Oversight use cases: what the people who run the agents see and do — teams, agents with
//! their activity and backlog, conversations and their messages with every recipient's delivery
//! state, runs and their journals, push registrations with their attempts and the parked ones,
//! storage use — and the actions: add and revoke an agent, un-park a registration, post into a
//! conversation as the team's human member.
//!
//! Every use case takes the caller's [`OperatorScope`] (the CLI, beside the store, acts with
//! [`OperatorScope::Everything`]; an admin request or a console session with its operator's):
//! anything of a team outside it is `NotFound`, exactly as an id that does not exist. The admin
//! API (`/v1/admin/…`), the console (`/console`) and the CLI call these and nothing else.

use std::collections::HashMap;
use std::time::Duration;

use crewbus_domain::{
    ActivityBucket, Agent, AgentActivity, BusError, BusResult, ConversationSummary, DateTime,
    FeedEvent, FeedKind, MAX_PAGE, Message, Operator, OperatorScope, PushAttempt, PushConfig,
    PushRegistration, Quotas, RecipientState, Record, Run, RunId, Sent, Seq, StorageUse,
    StreamKind, Team, Utc, Uuid, fill_buckets,
};

use crate::usecases::admin::NewAgent;
use crate::usecases::bus::{Bus, before};
use crate::usecases::history::HistoryEntry;
use crate::usecases::runs::bus_error;

/// The overview's chart: one bucket per minute …
pub const OVERVIEW_BUCKET: Duration = Duration::from_secs(60);

/// … over the last hour.
pub const OVERVIEW_SPAN: Duration = Duration::from_secs(3600);

/// How many attempts of each registration the admin views show (the log keeps
/// `push.attempts_kept`, 20 by default).
pub const ATTEMPTS_SHOWN: usize = 20;

/// The most runs one [`Bus::admin_push`] reads (each run costs a read of its registrations and
/// of each one's attempts log).
pub const MAX_PUSH_RUNS: usize = 100;

/// One team as the overview shows it.
#[derive(Debug, Clone)]
pub struct TeamOverview {
    /// The team.
    pub team: Team,
    /// Messages sent and deliveries confirmed per minute over the last hour, oldest first,
    /// zero-filled (61 buckets: the current minute is the last, partly elapsed).
    pub series: Vec<ActivityBucket>,
    /// Deliveries pending: receipts of stored messages not yet confirmed, over every agent not
    /// revoked (a revoked agent's never arrive; its own row shows them).
    pub pending: u64,
    /// When the oldest of those was stored.
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// Push registrations of the team's runs that are parked (count).
    pub parked: usize,
    /// Agents of the team (revoked ones and human members included), and how many are active
    /// agents proper.
    pub agents: usize,
    /// Active agents (not revoked, not human members).
    pub active_agents: usize,
}

/// One message as an operator sees it: the message, its body (or why there is none) and where
/// each recipient's copy stands.
#[derive(Debug, Clone)]
pub struct AdminMessage {
    /// The message with its body or absence, as history reads it.
    pub entry: HistoryEntry,
    /// Each recipient's receipt and hand-outs, by recipient key.
    pub recipients: Vec<RecipientState>,
}

/// A page of a conversation's messages for an operator.
#[derive(Debug, Clone)]
pub struct AdminPage {
    /// The messages with `seq > after_seq`, in order (up to and including the first pending).
    pub messages: Vec<AdminMessage>,
    /// The cursor for the next page.
    pub next_after_seq: u64,
    /// The team's agents and human members, to name senders and recipients.
    pub members: Members,
}

/// A team's agents by id (revoked ones and human members included): what names the senders,
/// recipients and conversation members an operator sees.
#[derive(Debug, Clone, Default)]
pub struct Members(HashMap<Uuid, Agent>);

impl Members {
    /// The members of `agents`.
    pub fn new(agents: impl IntoIterator<Item = Agent>) -> Self {
        Members(agents.into_iter().map(|a| (a.id, a)).collect())
    }

    /// The member with this id, if the team has it.
    pub fn get(&self, id: Uuid) -> Option<&Agent> {
        self.0.get(&id)
    }
}

/// A team's conversations with the members that name theirs.
#[derive(Debug, Clone)]
pub struct ConversationList {
    /// Oldest first, each with its members, message count and latest send.
    pub conversations: Vec<ConversationSummary>,
    /// The team's agents and human members.
    pub members: Members,
}

/// A push registration with its newest attempts.
#[derive(Debug, Clone)]
pub struct RegistrationView {
    /// The registration and its delivery state (never a credential in clear outside the
    /// process: callers render the scheme only).
    pub registration: PushRegistration,
    /// Its attempts log, newest first (at most [`ATTEMPTS_SHOWN`]).
    pub attempts: Vec<PushAttempt>,
    /// The team of its run.
    pub team: Uuid,
}

/// The push registrations of one run.
#[derive(Debug, Clone)]
pub struct RunPush {
    /// The run.
    pub run: Run,
    /// Its registrations (none once every destination acknowledged its terminal record).
    pub registrations: Vec<RegistrationView>,
}

/// What one team keeps, and the broker's limits where it has them.
#[derive(Debug, Clone)]
pub struct TeamStorage {
    /// The team.
    pub team: Team,
    /// Per body backend: stored bodies and bytes, pending publications (the ledger's count).
    pub uses: Vec<StorageUse>,
    /// The team's JetStream streams as the broker reports them (`None`: the team has no streams
    /// there, or no broker is configured, or the broker did not answer).
    pub streams: Vec<StreamUse>,
}

/// One broker stream of a team: its limits and contents, read back from the broker.
#[derive(Debug, Clone)]
pub struct StreamUse {
    /// Which stream.
    pub kind: StreamKind,
    /// Its limits (messages, bytes).
    pub limits: Quotas,
    /// Messages it holds (count).
    pub messages: u64,
    /// Bytes it holds.
    pub bytes: u64,
}

impl Bus {
    /// The teams of `scope`, by name.
    pub async fn admin_teams(&self, scope: &OperatorScope) -> BusResult<Vec<Team>> {
        Ok(self
            .ports
            .ledger
            .teams()
            .await?
            .into_iter()
            .filter(|t| scope.covers(t.id))
            .collect())
    }

    /// One team of `scope`. Errors: unknown, or outside the scope → `NotFound`.
    pub async fn admin_team(&self, scope: &OperatorScope, team: Uuid) -> BusResult<Team> {
        in_scope(scope, team)?;
        self.ports.ledger.team(team).await
    }

    /// The overview of every team of `scope`: the last hour's sends and deliveries per minute,
    /// pending deliveries and the oldest one's age, parked registrations. Errors: the ledger's.
    pub async fn admin_overview(&self, scope: &OperatorScope) -> BusResult<Vec<TeamOverview>> {
        let teams = self.admin_teams(scope).await?;
        let now = self.now();
        let since = before(now, OVERVIEW_SPAN);
        let parked = self.parked_registrations().await?;
        let mut out = Vec::with_capacity(teams.len());
        for team in teams {
            let found = self
                .ports
                .oversight
                .activity(team.id, since, now, OVERVIEW_BUCKET)
                .await?;
            let agents = self.ports.oversight.agent_activity(team.id).await?;
            // A revoked agent's deliveries never arrive: counting them would keep a team
            // "stuck" for ever. Its own row still shows them.
            let waiting = || agents.iter().filter(|a| !a.agent.revoked());
            out.push(TeamOverview {
                series: fill_buckets(since, now, OVERVIEW_BUCKET, &found),
                pending: waiting().map(|a| a.pending).sum(),
                oldest_pending_at: waiting().filter_map(|a| a.oldest_pending_at).min(),
                parked: parked.iter().filter(|p| p.team == team.id).count(),
                active_agents: agents
                    .iter()
                    .filter(|a| !a.agent.revoked() && !a.agent.is_human())
                    .count(),
                agents: agents.len(),
                team,
            });
        }
        Ok(out)
    }

    /// The agents of a team of `scope` with their last activity, pending deliveries and the
    /// oldest one. Errors: the team unknown or outside the scope → `NotFound`.
    pub async fn admin_agents(
        &self,
        scope: &OperatorScope,
        team: Uuid,
    ) -> BusResult<Vec<AgentActivity>> {
        in_scope(scope, team)?;
        self.ports.oversight.agent_activity(team).await
    }

    /// Adds an agent to a team of `scope` (its token is returned once). Errors: as
    /// [`Bus::add_agent`]; the team outside the scope → `NotFound`.
    pub async fn admin_add_agent(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        name: &str,
    ) -> BusResult<NewAgent> {
        in_scope(scope, team)?;
        let new = self.add_agent(team, name).await?;
        self.emit(vec![
            FeedEvent::new(team, FeedKind::AgentAdded).agent(new.agent.id),
        ]);
        Ok(new)
    }

    /// Revokes an agent of a team of `scope` (as [`Bus::revoke_agent`]: its next call is 401 on
    /// every server within the token cache's bound, its waiting fetches end). Errors: unknown
    /// agent or team, or outside the scope → `NotFound`.
    pub async fn admin_revoke_agent(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<Agent> {
        in_scope(scope, team)?;
        self.revoke_agent(team, agent).await
    }

    /// The conversations of a team of `scope`, oldest first, with members, message count and
    /// latest send. Errors: the team unknown or outside the scope → `NotFound`.
    pub async fn admin_conversations(
        &self,
        scope: &OperatorScope,
        team: Uuid,
    ) -> BusResult<Vec<ConversationSummary>> {
        in_scope(scope, team)?;
        self.ports.oversight.conversation_summaries(team).await
    }

    /// The conversations of a team of `scope` (as [`Bus::admin_conversations`]) with the
    /// team's members, to name the conversations' members. Errors: the team unknown or outside
    /// the scope → `NotFound`.
    pub async fn admin_conversation_list(
        &self,
        scope: &OperatorScope,
        team: Uuid,
    ) -> BusResult<ConversationList> {
        let conversations = self.admin_conversations(scope, team).await?;
        let members = Members::new(self.ports.ledger.agents(team).await?);
        Ok(ConversationList {
            conversations,
            members,
        })
    }

    /// One conversation of a team of `scope`, with its size. Errors: unknown, another team's,
    /// or outside the scope → `NotFound`.
    pub async fn admin_conversation(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        conversation: Uuid,
    ) -> BusResult<ConversationSummary> {
        self.admin_conversations(scope, team)
            .await?
            .into_iter()
            .find(|c| c.conversation.id == conversation)
            .ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))
    }

    /// A page of a conversation's messages after `after_seq` (at most `limit`), each with its
    /// body and every recipient's delivery state. Errors: the conversation unknown, another
    /// team's or outside the scope → `NotFound`; bad `limit` or `after_seq` → `Invalid`.
    pub async fn admin_messages(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<AdminPage> {
        in_scope(scope, team)?;
        crewbus_domain::validate_limit(limit)?;
        crewbus_domain::validate_position("after_seq", after_seq)?;
        let page = self
            .history_page(team, conversation, after_seq, limit)
            .await?;
        let ids: Vec<Uuid> = page.entries.iter().map(|e| e.message.id).collect();
        let mut states = self.ports.oversight.recipient_states(team, &ids).await?;
        let members = Members::new(self.ports.ledger.agents(team).await?);
        let messages = page
            .entries
            .into_iter()
            .map(|entry| {
                let id = entry.message.id;
                let (mine, rest) = states.drain(..).partition(|s| s.receipt.message == id);
                states = rest;
                AdminMessage {
                    entry,
                    recipients: mine,
                }
            })
            .collect();
        Ok(AdminPage {
            messages,
            next_after_seq: page.next_after_seq,
            members,
        })
    }

    /// The newest `limit` messages of a conversation (what its live page shows), oldest of
    /// them first. Errors: as [`Bus::admin_messages`].
    pub async fn admin_latest_messages(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        conversation: Uuid,
        limit: usize,
    ) -> BusResult<AdminPage> {
        let summary = self.admin_conversation(scope, team, conversation).await?;
        // `seq` is gap-free from 1, so the newest `limit` follow `messages − limit`.
        let after = summary.messages.saturating_sub(limit as u64);
        self.admin_messages(scope, team, conversation, after, limit)
            .await
    }

    /// One message of a team of `scope` with its whole body and every recipient's state.
    /// Errors: unknown, another team's or outside the scope → `NotFound`.
    pub async fn admin_message(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        message: Uuid,
    ) -> BusResult<AdminMessage> {
        self.admin_message_page(scope, team, message)
            .await?
            .messages
            .pop()
            .ok_or_else(|| BusError::not_found(format!("message {message}")))
    }

    /// One message of a team of `scope` as a page of one (with the team's members, to name its
    /// sender and recipients): its whole body and every recipient's state. Errors: as
    /// [`Bus::admin_message`].
    pub async fn admin_message_page(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        message: Uuid,
    ) -> BusResult<AdminPage> {
        in_scope(scope, team)?;
        let m: Message = self.ports.ledger.message(team, message).await?;
        let mut page = self
            .admin_messages(scope, team, m.conversation, m.seq.saturating_sub(1), 1)
            .await?;
        page.messages.retain(|a| a.entry.message.id == message);
        if page.messages.is_empty() {
            return Err(BusError::not_found(format!("message {message}")));
        }
        Ok(page)
    }

    /// Posts `body` into a conversation of a team of `scope` as `operator`'s human member of
    /// that team (created and joined on its first post; see `Oversight::human_member`), through
    /// the same send path as an agent's (group commit, idempotent on `request_id`). Agents see
    /// the message marked as from a human. Errors: the conversation unknown, another team's or
    /// outside the scope → `NotFound`; the operator or its human member revoked → `Forbidden`;
    /// otherwise as [`Bus::send`].
    pub async fn admin_post(
        &self,
        operator: &Operator,
        team: Uuid,
        conversation: Uuid,
        request_id: String,
        body: String,
    ) -> BusResult<Sent> {
        in_scope(&operator.scope, team)?;
        let human = self
            .ports
            .oversight
            .human_member(team, conversation, operator, self.now())
            .await?;
        self.send(&human, conversation, request_id, body, None)
            .await
    }

    /// The newest runs of a team of `scope` (at most `limit`, admitted before `before` when
    /// given). Errors: the team outside the scope → `NotFound`; bad `limit` → `Invalid`.
    pub async fn admin_runs(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> BusResult<Vec<Run>> {
        in_scope(scope, team)?;
        crewbus_domain::validate_limit(limit)?;
        self.ports
            .journal
            .runs(team, before, limit)
            .await
            .map_err(bus_error)
    }

    /// A run of a team of `scope` and up to `limit` of its records from `from_seq`. Errors: the
    /// run unknown, another team's, or outside the scope → `NotFound`; `limit` 0 or above
    /// `MAX_PAGE`, `from_seq` 0 or above `MAX_POSITION` → `Invalid`.
    pub async fn admin_run(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        run: RunId,
        from_seq: Seq,
        limit: usize,
    ) -> BusResult<(Run, Vec<Record>)> {
        crewbus_domain::validate_limit(limit)?;
        if from_seq.0 == 0 {
            return Err(BusError::invalid("from_seq starts at 1"));
        }
        crewbus_domain::validate_position("from_seq", from_seq.0)?;
        let r = self.run_in_scope(scope, run).await?;
        if r.team != team {
            return Err(BusError::not_found(format!("run {run}")));
        }
        let records = self
            .ports
            .journal
            .read(run, from_seq, limit)
            .await
            .map_err(bus_error)?;
        Ok((r, records))
    }

    /// The push registrations of the newest `runs` runs of a team of `scope`, each with its
    /// attempts log. Errors: the team outside the scope → `NotFound`; `runs` 0 or above
    /// [`MAX_PUSH_RUNS`] → `Invalid`.
    pub async fn admin_push(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        runs: usize,
    ) -> BusResult<Vec<RunPush>> {
        if runs == 0 || runs > MAX_PUSH_RUNS {
            return Err(BusError::invalid(format!(
                "runs must be between 1 and {MAX_PUSH_RUNS}"
            )));
        }
        let runs = self.admin_runs(scope, team, None, runs).await?;
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            let registrations = self
                .ports
                .push_store
                .registrations(run.id)
                .await
                .map_err(bus_error)?;
            let mut views = Vec::with_capacity(registrations.len());
            for registration in registrations {
                views.push(self.registration_view(registration, team).await?);
            }
            out.push(RunPush {
                run,
                registrations: views,
            });
        }
        Ok(out)
    }

    /// The push registrations of one run of a team of `scope` as configured (id, URL,
    /// authentication; none once every destination acknowledged its terminal record), by id:
    /// what `crewbus push list` prints. Errors: the run unknown or outside the scope →
    /// `NotFound`.
    pub async fn admin_push_configs(
        &self,
        scope: &OperatorScope,
        run: RunId,
    ) -> BusResult<Vec<PushConfig>> {
        let run = self.run_in_scope(scope, run).await?;
        self.ports.push_store.list(run.id).await.map_err(bus_error)
    }

    /// The parked push registrations of the teams of `scope`, oldest parked first, at most
    /// `limit`, with their runs' teams (without their attempts logs: what `crewbus push parked`
    /// prints). Errors: `limit` 0 or above `MAX_PAGE` → `Invalid`.
    pub async fn admin_parked_registrations(
        &self,
        scope: &OperatorScope,
        limit: usize,
    ) -> BusResult<Vec<ParkedRegistration>> {
        crewbus_domain::validate_limit(limit)?;
        Ok(self
            .parked_registrations()
            .await?
            .into_iter()
            .filter(|p| scope.covers(p.team))
            .take(limit)
            .collect())
    }

    /// The parked push registrations of the teams of `scope` (oldest parked first, at most
    /// `MAX_PAGE`), each with its attempts log.
    pub async fn admin_parked(&self, scope: &OperatorScope) -> BusResult<Vec<RegistrationView>> {
        let mut out = Vec::new();
        for parked in self.parked_registrations().await? {
            if scope.covers(parked.team) {
                out.push(
                    self.registration_view(parked.registration, parked.team)
                        .await?,
                );
            }
        }
        Ok(out)
    }

    /// Un-parks a registration of a run of a team of `scope`: due now, resuming from its cursor.
    /// Returns whether a parked registration existed. Errors: the run unknown or outside the
    /// scope → `NotFound`.
    pub async fn admin_unpark(
        &self,
        scope: &OperatorScope,
        run: RunId,
        id: &str,
    ) -> BusResult<bool> {
        let r = self.run_in_scope(scope, run).await?;
        let found = self
            .ports
            .push_store
            .unpark(run, id, self.now())
            .await
            .map_err(bus_error)?;
        if found {
            self.emit(vec![
                FeedEvent::new(r.team, FeedKind::RegistrationParked).run(run.0),
            ]);
        }
        Ok(found)
    }

    /// What each team of `scope` keeps: the ledger's count per body backend, and the team's
    /// broker streams (limits and contents) when a broker is configured and answers.
    pub async fn admin_storage(&self, scope: &OperatorScope) -> BusResult<Vec<TeamStorage>> {
        let teams = self.admin_teams(scope).await?;
        let mut out = Vec::with_capacity(teams.len());
        for team in teams {
            let uses = self.ports.oversight.storage_use(team.id).await?;
            let mut streams = Vec::new();
            if let Some(broker) = &self.ports.broker {
                for kind in [StreamKind::Bodies, StreamKind::Inbox] {
                    // A team without streams, or a broker that refuses or does not answer, shows
                    // none: the ledger's figures stand on their own.
                    if let Ok(stream) = broker.stream_status(team.id, kind).await {
                        streams.push(StreamUse {
                            kind,
                            limits: stream.limits,
                            messages: stream.messages,
                            bytes: stream.bytes,
                        });
                    }
                }
            }
            out.push(TeamStorage {
                team,
                uses,
                streams,
            });
        }
        Ok(out)
    }

    /// A run, when its team is inside `scope`. Errors: unknown or outside → `NotFound`.
    async fn run_in_scope(&self, scope: &OperatorScope, run: RunId) -> BusResult<Run> {
        let r = self.ports.journal.run(run).await.map_err(bus_error)?;
        if !scope.covers(r.team) {
            return Err(BusError::not_found(format!("run {run}")));
        }
        Ok(r)
    }

    async fn registration_view(
        &self,
        registration: PushRegistration,
        team: Uuid,
    ) -> BusResult<RegistrationView> {
        let attempts = self
            .ports
            .push_store
            .attempts(
                registration.config.run,
                &registration.config.id,
                ATTEMPTS_SHOWN,
            )
            .await
            .map_err(bus_error)?;
        Ok(RegistrationView {
            registration,
            attempts,
            team,
        })
    }

    /// Every parked registration (up to `MAX_PAGE`) with its run's team; a registration whose
    /// run the journal does not know is left out (nobody's team).
    async fn parked_registrations(&self) -> BusResult<Vec<ParkedRegistration>> {
        let parked = self
            .ports
            .push_store
            .parked(MAX_PAGE)
            .await
            .map_err(bus_error)?;
        let mut out = Vec::with_capacity(parked.len());
        for registration in parked {
            match self.ports.journal.run(registration.config.run).await {
                Ok(run) => out.push(ParkedRegistration {
                    registration,
                    team: run.team,
                }),
                Err(crewbus_domain::StoreError::NotFound { .. }) => {}
                Err(e) => return Err(bus_error(e)),
            }
        }
        Ok(out)
    }
}

/// A parked registration and its run's team.
#[derive(Debug, Clone)]
pub struct ParkedRegistration {
    /// The registration (never a credential in clear outside the process: callers render the
    /// scheme only).
    pub registration: PushRegistration,
    /// The team of its run.
    pub team: Uuid,
}

/// `Ok` when `team` is inside `scope`; `NotFound` otherwise (never `Forbidden`: another team's
/// ids are not revealed).
fn in_scope(scope: &OperatorScope, team: Uuid) -> BusResult<()> {
    if scope.covers(team) {
        Ok(())
    } else {
        Err(BusError::not_found(format!("team {team}")))
    }
}
