//! The memory ledger's oversight reads (activity, backlog, sizes, delivery states, buckets,
//! storage) and the human members operators post as, over the ledger's state.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    ActivityBucket, Agent, AgentActivity, AgentKind, BusError, BusResult, ConversationSummary,
    Member, Operator, Publication, RecipientState, StatusLine, StorageUse, TokenHash, WakeupTarget,
    human_member_name, recipient_key_for, validate_activity, validate_batch,
};
use crewbus_ports::Oversight;
use uuid::Uuid;

use super::MemoryLedger;

#[async_trait]
impl Oversight for MemoryLedger {
    async fn touch_agents(&self, seen: &[WakeupTarget], at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(seen.len())?;
        let mut st = self.state()?;
        let mut changed = 0;
        let mut done = HashSet::new();
        for target in seen.iter().filter(|t| done.insert(**t)) {
            if st.agent_of(target.team, target.agent).is_err() {
                continue;
            }
            match st.last_active.get_mut(&target.agent) {
                Some(last) if *last >= at => {}
                Some(last) => {
                    *last = at;
                    changed += 1;
                }
                None => {
                    st.last_active.insert(target.agent, at);
                    changed += 1;
                }
            }
        }
        Ok(changed)
    }

    async fn agent_activity(&self, team: Uuid) -> BusResult<Vec<AgentActivity>> {
        let st = self.state()?;
        st.team_of(team)?;
        let mut agents: Vec<&Agent> = st.agents.values().filter(|a| a.team == team).collect();
        agents.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(agents
            .into_iter()
            .map(|agent| {
                let pending: Vec<DateTime<Utc>> = st
                    .by_recipient
                    .get(&agent.id)
                    .into_iter()
                    .flatten()
                    .filter(|m| st.messages[*m].publication == Publication::Stored)
                    .map(|m| &st.receipts[&(*m, agent.id)])
                    .filter(|r| r.delivered_at.is_none())
                    .filter_map(|r| r.stored_at)
                    .collect();
                let current_run = st
                    .runs
                    .values()
                    .map(|r| &r.run)
                    .filter(|r| r.agent == agent.id && r.team == team && !r.is_sealed())
                    .max_by_key(|r| (r.admitted_at, r.id.0))
                    .map(|r| r.id.0);
                AgentActivity {
                    agent: agent.clone(),
                    last_active_at: st.last_active.get(&agent.id).copied(),
                    pending: pending.len() as u64,
                    oldest_pending_at: pending.into_iter().min(),
                    status: st.statuses.get(&agent.id).cloned(),
                    current_run,
                }
            })
            .collect())
    }

    async fn set_status(&self, agent: &Agent, status: &str, at: DateTime<Utc>) -> BusResult<()> {
        let mut st = self.state()?;
        if st.agent_of(agent.team, agent.id)?.revoked() {
            return Err(BusError::forbidden("the agent is revoked"));
        }
        if status.is_empty() {
            st.statuses.remove(&agent.id);
        } else {
            let line = StatusLine {
                text: status.to_owned(),
                set_at: at,
            };
            st.statuses.insert(agent.id, line);
        }
        Ok(())
    }

    async fn conversation_summaries(&self, team: Uuid) -> BusResult<Vec<ConversationSummary>> {
        let st = self.state()?;
        st.team_of(team)?;
        let mut rows: Vec<_> = st
            .conversations
            .values()
            .filter(|c| c.conversation.team == team)
            .collect();
        rows.sort_by_key(|c| c.order);
        Ok(rows
            .into_iter()
            .map(|c| ConversationSummary {
                conversation: c.conversation.clone(),
                messages: c.messages.len() as u64,
                last_sent_at: c
                    .messages
                    .values()
                    .next_back()
                    .map(|m| st.messages[m].sent_at),
            })
            .collect())
    }

    async fn recipient_states(
        &self,
        team: Uuid,
        messages: &[Uuid],
    ) -> BusResult<Vec<RecipientState>> {
        validate_batch(messages.len())?;
        let st = self.state()?;
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for message in messages.iter().filter(|m| seen.insert(**m)) {
            if st.message_of(team, *message).is_err() {
                continue;
            }
            let mut states: Vec<RecipientState> = st
                .recipients
                .get(message)
                .into_iter()
                .flatten()
                .map(|recipient| {
                    let hand_outs = st
                        .hand_outs_by_pair
                        .get(&(*message, *recipient))
                        .map(Vec::as_slice)
                        .unwrap_or_default();
                    RecipientState {
                        receipt: st.receipts[&(*message, *recipient)].clone(),
                        hand_outs: u32::try_from(hand_outs.len()).unwrap_or(u32::MAX),
                        last_handed_out_at: hand_outs
                            .iter()
                            .map(|d| st.hand_outs[d].hand_out.issued_at)
                            .max(),
                    }
                })
                .collect();
            states.sort_by(|a, b| a.receipt.recipient_key.cmp(&b.receipt.recipient_key));
            out.extend(states);
        }
        Ok(out)
    }

    async fn activity(
        &self,
        team: Uuid,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        bucket: Duration,
    ) -> BusResult<Vec<ActivityBucket>> {
        let step = validate_activity(since, until, bucket)?;
        let st = self.state()?;
        st.team_of(team)?;
        let within = |at: DateTime<Utc>| since <= at && at < until;
        let start = |at: DateTime<Utc>| at.timestamp_micros().div_euclid(step) * step;
        let mut buckets: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for m in st.messages.values().filter(|m| m.team == team) {
            if within(m.sent_at) {
                buckets.entry(start(m.sent_at)).or_default().0 += 1;
            }
            for recipient in st.recipients.get(&m.id).into_iter().flatten() {
                if let Some(at) = st.receipts[&(m.id, *recipient)].delivered_at
                    && within(at)
                {
                    buckets.entry(start(at)).or_default().1 += 1;
                }
            }
        }
        Ok(buckets
            .into_iter()
            .map(|(micros, (sent, delivered))| ActivityBucket {
                start: DateTime::from_timestamp_micros(micros).unwrap_or(since),
                sent,
                delivered,
            })
            .collect())
    }

    async fn storage_use(&self, team: Uuid) -> BusResult<Vec<StorageUse>> {
        let st = self.state()?;
        st.team_of(team)?;
        let mut by_backend: BTreeMap<&str, StorageUse> = BTreeMap::new();
        for m in st.messages.values().filter(|m| m.team == team) {
            let kept = m.publication == Publication::Stored && m.retained_at.is_none();
            let pending = m.publication == Publication::PendingPublication;
            if !kept && !pending {
                continue;
            }
            let entry = by_backend.entry(&m.backend).or_insert_with(|| StorageUse {
                backend: m.backend.clone(),
                messages: 0,
                bytes: 0,
                pending: 0,
            });
            if kept {
                entry.messages += 1;
                entry.bytes += m.body_len;
            } else {
                entry.pending += 1;
            }
        }
        Ok(by_backend.into_values().collect())
    }

    async fn human_member(
        &self,
        team: Uuid,
        conversation: Uuid,
        operator: &Operator,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        let mut st = self.state()?;
        st.team_of(team)?;
        st.conversation_of(team, conversation)?;
        let stored = st
            .operators
            .get(&operator.id)
            .filter(|o| !o.revoked() && !operator.revoked())
            .ok_or_else(|| BusError::forbidden("the operator is revoked"))?
            .clone();
        stored.check_team(team, &format!("team {team}"))?;
        let agent = match st.humans.get(&(team, stored.id)) {
            Some(id) => st.agents[id].clone(),
            None => {
                let name = human_member_name(&stored.name);
                if st.agents.values().any(|a| a.team == team && a.name == name) {
                    return Err(BusError::conflict(format!("agent name {name:?} is taken")));
                }
                let id = Uuid::new_v4();
                let agent = Agent {
                    id,
                    team,
                    name,
                    recipient_key: recipient_key_for(id),
                    token_hash: TokenHash::held_by_nobody(),
                    created_at: at,
                    revoked_at: None,
                    kind: AgentKind::Human,
                };
                st.tokens.insert(agent.token_hash, id);
                st.agents.insert(id, agent.clone());
                st.humans.insert((team, stored.id), id);
                agent
            }
        };
        if agent.revoked() {
            return Err(BusError::forbidden(
                "the operator's human member is revoked",
            ));
        }
        let row = st
            .conversations
            .get_mut(&conversation)
            .expect("checked above");
        if !row.conversation.has_member(agent.id) {
            let members = &mut row.conversation.members;
            members.push(Member {
                agent: agent.id,
                recipient_key: agent.recipient_key.clone(),
                joined_at: at,
            });
            members.sort_by_key(|m| (m.joined_at, m.agent));
        }
        Ok(agent)
    }
}
