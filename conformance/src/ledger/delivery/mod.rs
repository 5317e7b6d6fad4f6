//! `Ledger` behaviours of delivery (hand-outs, receipts, a revoked recipient, the inbox watch's
//! read), and the requests and outcomes they share.

use std::time::Duration;

use crewbus_domain::{HandOut, HandOutOutcome, HandOutRequest, HandOutSource, InboxAck};
use uuid::Uuid;

use chrono::{DateTime, Utc};
use crewbus_domain::Agent;

use super::scene::{INBOX, Scene};

mod hand_out;
mod receipts;
mod revoked;
mod watch;

pub use hand_out::*;
pub use receipts::*;
pub use revoked::*;
pub use watch::*;

/// A sweep target any stored message wakes (a waiting fetch's).
pub(crate) fn any_message(target: crewbus_domain::WakeupTarget) -> crewbus_domain::SweepTarget {
    crewbus_domain::SweepTarget {
        target,
        stored_after: None,
    }
}

pub(crate) fn from_ledger(message: Uuid) -> HandOutRequest {
    HandOutRequest {
        message,
        source: HandOutSource::Ledger,
    }
}

pub(crate) fn from_inbox(message: Uuid, ack_subject: &str, deliveries: u64) -> HandOutRequest {
    HandOutRequest {
        message,
        source: HandOutSource::Inbox {
            event_id: Uuid::new_v4(),
            ack: InboxAck {
                inbox: INBOX.to_owned(),
                ack_subject: ack_subject.to_owned(),
            },
            deliveries,
        },
    }
}

pub(crate) fn issued(outcome: &HandOutOutcome) -> HandOut {
    match outcome {
        HandOutOutcome::Issued(h) => h.clone(),
        other => panic!("expected Issued, got {other:?}"),
    }
}

pub(crate) const GRACE: Duration = Duration::from_secs(60);

pub(crate) fn out_id(outcome: &HandOutOutcome) -> Uuid {
    match outcome {
        HandOutOutcome::Unknown { message }
        | HandOutOutcome::AlreadyDelivered { message }
        | HandOutOutcome::Held { message, .. } => *message,
        HandOutOutcome::Issued(h) => h.message,
    }
}

impl Scene {
    /// Hands the `requests` out to `to` (for the grace period) at `at`; the outcomes.
    pub(crate) async fn hand_out_to(
        &self,
        to: &Agent,
        requests: &[HandOutRequest],
        at: DateTime<Utc>,
    ) -> Vec<HandOutOutcome> {
        self.ledger
            .hand_out(self.team.id, to.id, requests, GRACE, at)
            .await
            .unwrap()
    }

    /// Hands message `message` out to `to` alone (from the ledger, for the grace period) at `at`
    /// and expects it issued.
    pub(crate) async fn issue(&self, to: &Agent, message: Uuid, at: DateTime<Utc>) -> HandOut {
        issued(&self.hand_out_to(to, &[from_ledger(message)], at).await[0])
    }
}
