//! Ack-after-commit behaviours: an inbox plus a receipt set the test owns (standing in for the
//! ledger). A reference is acked only after its receipt is committed; a lost ack only causes a
//! redelivery, which the receipt set recognises.
//!
//! The ledger-coupled version of these runs in the app's end-to-end tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crewbus_domain::{InboxRef, InboxStatus};
use uuid::Uuid;

use crewbus_ports::Inbox;

use crate::inbox::{publish_refs, status_becomes};
use crate::wait::fetch_at_least;
use crate::{Capabilities, InboxFixture};

/// The receipts a test has committed, standing in for the ledger: one row per event id, however
/// often the same event is committed.
#[derive(Debug, Default)]
pub struct ReceiptSet {
    rows: Mutex<HashMap<Uuid, u64>>,
}

/// What committing a receipt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// The receipt was recorded now.
    Recorded,
    /// A receipt for this event was already recorded: the reference was a redelivery, nothing
    /// is recorded again.
    AlreadyRecorded,
}

impl ReceiptSet {
    /// Commits the receipt of `reference` (idempotent on its event id).
    pub fn commit(&self, reference: &InboxRef) -> Commit {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        match rows.get(&reference.event_id) {
            Some(_) => Commit::AlreadyRecorded,
            None => {
                rows.insert(reference.event_id, 1);
                Commit::Recorded
            }
        }
    }

    /// Receipt rows recorded for `event_id` (0 or 1 when commits are idempotent).
    pub fn rows(&self, event_id: Uuid) -> u64 {
        let rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        rows.get(&event_id).copied().unwrap_or(0)
    }
}

/// What every behaviour here starts from: the fixture's capabilities, its inbox and a fresh
/// recipient.
fn begin<F: InboxFixture + ?Sized>(fx: &F) -> (Capabilities, Arc<dyn Inbox>, String) {
    (
        fx.capabilities().clone(),
        fx.inbox(),
        crate::samples::recipient(),
    )
}

fn nothing_awaiting() -> InboxStatus {
    InboxStatus {
        present: true,
        ..InboxStatus::default()
    }
}

/// Fetched and not acked (the commit "failed"): after the ack wait it comes back, redelivered,
/// and no receipt exists.
pub async fn uncommitted_reference_comes_back<F: InboxFixture + ?Sized>(
    fx: &F,
    receipts: &ReceiptSet,
) {
    let (caps, inbox, who) = begin(fx);
    let event = publish_refs(&*inbox, &who, 1).await[0];
    let first = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout).await;
    assert_eq!(first[0].event_id, event);
    // The commit fails: no receipt, so no ack.
    fx.advance(caps.ack_wait).await;
    let again = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout).await;
    assert_eq!(again[0].event_id, event);
    assert!(again[0].redelivered());
    assert_eq!(receipts.rows(event), 0);
}

/// Fetched, committed and acked: it never comes back and nothing awaits an ack.
pub async fn committed_and_acked_reference_never_comes_back<F: InboxFixture + ?Sized>(
    fx: &F,
    receipts: &ReceiptSet,
) {
    let (caps, inbox, who) = begin(fx);
    publish_refs(&*inbox, &who, 1).await;
    let r = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout)
        .await
        .remove(0);
    assert_eq!(receipts.commit(&r), Commit::Recorded);
    inbox.ack_reference(&r.ack_subject).await.unwrap();
    for _ in 0..2 {
        fx.advance(caps.ack_wait).await;
        assert!(inbox.fetch_references(&who, 10).await.unwrap().is_empty());
    }
    status_becomes(fx, &who, nothing_awaiting()).await;
    assert_eq!(receipts.rows(r.event_id), 1);
}

/// An ack repeated (a retry after a lost confirmation) is harmless: `Ok`, and it neither brings
/// the reference back nor touches another one.
pub async fn repeated_ack_is_harmless<F: InboxFixture + ?Sized>(fx: &F, receipts: &ReceiptSet) {
    let (caps, inbox, who) = begin(fx);
    let published = publish_refs(&*inbox, &who, 2).await;
    let refs = fetch_at_least(&*inbox, &who, 2, 10, caps.settle_timeout).await;
    let r = &refs[0];
    assert_eq!(receipts.commit(r), Commit::Recorded);
    inbox.ack_reference(&r.ack_subject).await.unwrap();
    inbox.ack_reference(&r.ack_subject).await.unwrap();
    fx.advance(caps.ack_wait).await;
    inbox.ack_reference(&r.ack_subject).await.unwrap();
    let again = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout).await;
    assert_eq!(
        again.iter().map(|r| r.event_id).collect::<Vec<_>>(),
        vec![published[1]],
        "only the unacked reference comes back"
    );
}

/// A reference redelivered after commit-but-no-ack (a crash between the two) is recognised by
/// the receipt set, acked without recording again, and never comes back: one receipt.
pub async fn redelivery_after_commit_is_recognised_and_recorded_once<F: InboxFixture + ?Sized>(
    fx: &F,
    receipts: &ReceiptSet,
) {
    let (caps, inbox, who) = begin(fx);
    let event = publish_refs(&*inbox, &who, 1).await[0];
    let first = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout)
        .await
        .remove(0);
    assert_eq!(receipts.commit(&first), Commit::Recorded);
    // Crash: the ack is never sent.
    fx.advance(caps.ack_wait).await;
    let again = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout)
        .await
        .remove(0);
    assert_eq!(again.event_id, event);
    assert!(again.redelivered());
    assert_eq!(receipts.commit(&again), Commit::AlreadyRecorded);
    inbox.ack_reference(&again.ack_subject).await.unwrap();
    fx.advance(caps.ack_wait).await;
    assert!(inbox.fetch_references(&who, 10).await.unwrap().is_empty());
    status_becomes(fx, &who, nothing_awaiting()).await;
    assert_eq!(receipts.rows(event), 1);
}
