//! `Ledger` behaviours (BUS.md §5): teams, agents, conversations, send, relay slots, inbox
//! events, hand-outs, receipts, history, retention and counts.
//!
//! One async function per behaviour, generic over the fixture, each on a fresh, empty ledger,
//! asserting error variants (never text). [`ledger_behaviours`] lists them for a test target.
//!
//! One file per section of the port: [`directory`] (teams, agents, conversations), [`send`],
//! [`send_batch`] (group commit), [`relay`] (outbox slots), [`references`] (inbox events),
//! [`delivery`] (hand-outs, receipts), [`history`], [`retention`] and [`counts`], and
//! [`humans`] (a team's human members); the validation every section shares stands here.
//! Their fixture, the small world they set up and their instants are [`fixture`], `scene` and
//! [`time`].

use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{BusError, DeliveryId, HandOutRequest, Settlement, SlotOutcome};
use uuid::Uuid;

use self::delivery::{GRACE, from_ledger};
use self::scene::{LEASE, REMOTE, scene};
use self::time::t;
use crate::LedgerFixture;
use crate::trial::{Behaviour, behaviours};

pub mod counts;
pub mod delivery;
pub mod directory;
pub mod fixture;
pub(crate) mod harness;
pub mod history;
pub mod humans;
pub mod references;
pub mod relay;
pub mod retention;
pub(crate) mod scene;
pub mod send;
pub mod send_batch;
pub mod time;

pub use counts::*;
pub use delivery::*;
pub use directory::*;
pub use history::*;
pub use humans::*;
pub use references::*;
pub use relay::*;
pub use retention::*;
pub use send::*;
pub use send_batch::*;

/// Every ledger behaviour, by name.
pub fn ledger_behaviours() -> Vec<Behaviour<dyn LedgerFixture>> {
    behaviours!["ledger" =>
        teams_are_created_listed_and_unique,
        team_backends_change_only_new_conversations,
        agents_authenticate_by_token_hash_until_revoked,
        agents_are_unique_per_team_and_token,
        conversations_hold_their_members_within_the_team,
        send_records_a_pending_message_with_an_outbox_slot,
        send_follows_the_local_backend,
        send_is_idempotent_on_request_id,
        concurrent_identical_sends_create_one_message,
        concurrent_sends_get_gap_free_seq,
        send_refuses_non_members_and_foreign_conversations,
        send_checks_the_acting_run,
        send_batch_answers_each_request_in_order,
        send_batch_answers_an_unstorable_request_id_alone,
        send_batch_numbers_each_conversation_in_queue_order,
        send_batch_bounds_are_checked,
        send_batch_of_refusals_writes_nothing,
        slot_is_leased_once_until_its_lease_expires,
        backing_off_slot_does_not_block_others,
        stale_generation_writes_nothing,
        expired_lease_writes_nothing,
        settle_confirmed_stores_and_makes_references_due,
        settle_retryable_backs_off,
        settle_fatal_fails_the_message_and_keeps_the_slot,
        settle_uncertain_marks_the_slot_for_reconcile,
        settle_reports_one_outcome_per_item,
        settle_applies_a_mixed_batch_in_call_order,
        references_are_leased_per_message_until_published,
        a_message_without_recipients_has_no_references,
        hand_out_holds_a_message_for_the_grace_period,
        hand_out_explains_what_it_does_not_issue,
        held_inbox_candidate_takes_over_the_ack,
        hand_out_and_confirm_decide_every_item_of_a_batch,
        concurrent_hand_outs_issue_each_message_once,
        confirm_is_once_per_receipt,
        confirm_checks_the_run_and_journals_delivery,
        top_up_lists_stored_undelivered_without_live_hand_out,
        wakeable_finds_waiters_with_something_to_hand_out_or_revoked,
        wakeable_skips_messages_stored_before_a_watchers_mark,
        inbox_news_lists_pending_messages_oldest_first,
        inbox_news_leaves_out_what_was_reported,
        inbox_news_a_lapsed_hand_out_is_news_only_if_never_reported,
        inbox_news_never_lists_a_confirmed_message,
        inbox_news_refuses_revoked_unknown_and_other_teams_agents,
        a_revoked_recipient_is_handed_and_confirmed_nothing,
        acknowledge_only_a_recipient_after_delivery_once,
        runs_of_another_team_are_not_found,
        receipts_are_one_per_recipient,
        messages_are_read_in_a_batch_within_the_team,
        history_stops_at_the_first_pending,
        history_explains_failed_and_retained_without_stopping,
        history_pages_by_limit,
        retention_marks_bodies_past_the_cutoff,
        counts_report_publication_and_delivery,
        limits_and_durations_are_validated,
        a_human_member_gets_no_receipts_and_cannot_authenticate,
        messages_of_a_human_member_carry_its_kind,
    ]
}

/// Limits out of range, batches above `MAX_PAGE` and zero leases are `Invalid`; empty batches
/// are answered with empty results.
pub async fn limits_and_durations_are_validated<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let ledger = Arc::clone(&s.ledger);
    let too_many = crewbus_domain::MAX_PAGE + 1;
    let settlements: Vec<Settlement> = (0..too_many)
        .map(|_| Settlement {
            slot: Uuid::new_v4(),
            generation: 1,
            outcome: SlotOutcome::Fatal {
                error: BusError::forbidden("x"),
            },
        })
        .collect();
    assert!(matches!(
        ledger.settle(&settlements, t(0)).await,
        Err(BusError::Invalid { .. })
    ));
    let ids: Vec<Uuid> = (0..too_many).map(|_| Uuid::new_v4()).collect();
    assert!(matches!(
        ledger.mark_references_published(&ids, t(0)).await,
        Err(BusError::Invalid { .. })
    ));
    let requests: Vec<HandOutRequest> = ids.iter().map(|id| from_ledger(*id)).collect();
    assert!(matches!(
        ledger
            .hand_out(s.team.id, s.b.id, &requests, GRACE, t(0))
            .await,
        Err(BusError::Invalid { .. })
    ));
    let deliveries: Vec<DeliveryId> = ids.iter().map(|id| DeliveryId(*id)).collect();
    assert!(matches!(
        ledger
            .confirm(s.team.id, s.b.id, &deliveries, None, t(0))
            .await,
        Err(BusError::Invalid { .. })
    ));
    assert!(ledger.settle(&[], t(0)).await.unwrap().is_empty());
    assert_eq!(
        ledger.mark_references_published(&[], t(0)).await.unwrap(),
        0
    );
    assert!(
        ledger
            .hand_out(s.team.id, s.b.id, &[], GRACE, t(0))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        ledger
            .confirm(s.team.id, s.b.id, &[], None, t(0))
            .await
            .unwrap()
            .is_empty()
    );
    for limit in [0, crewbus_domain::MAX_PAGE + 1] {
        assert!(matches!(
            ledger.lease_slots(t(0), LEASE, limit).await,
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            ledger.lease_inbox_events(t(0), LEASE, limit).await,
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            ledger.retention_due(t(0), limit).await,
            Err(BusError::Invalid { .. })
        ));
    }
    assert!(matches!(
        ledger.lease_slots(t(0), Duration::ZERO, 10).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        ledger.lease_inbox_events(t(0), Duration::ZERO, 10).await,
        Err(BusError::Invalid { .. })
    ));
}
