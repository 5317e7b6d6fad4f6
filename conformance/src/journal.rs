//! `Journal` behaviours (PUSH.md §1): admission, gap-free numbering from 1, the terminal seal,
//! resume, notes, paged reads, and a team's runs newest first.
//!
//! One async function per behaviour, generic over the fixture, each on a fresh, empty store.
//! [`journal_behaviours`] lists them for a test target.

use crewbus_domain::{RecordKind, RunId, RunOutcome, Seq, StoreError};
use uuid::Uuid;

use crate::LedgerFixture;
use crate::ledger::time::t;
use crate::trial::{Behaviour, behaviours};

/// Every journal behaviour, by name.
pub fn journal_behaviours() -> Vec<Behaviour<dyn LedgerFixture>> {
    behaviours!["journal" =>
        admit_writes_run_admitted_as_seq_one,
        records_are_gap_free_from_one,
        nothing_is_appended_after_the_seal,
        resume_of_a_sealed_run_is_refused,
        read_pages_from_a_seq,
        unknown_run_is_not_found,
        runs_are_independent,
        oversize_text_is_invalid,
        runs_are_listed_newest_first_within_the_team,
        runs_page_before_an_admission_time,
    ]
}

/// `admit` mints a run whose first record is `RunAdmitted` at seq 1 with team and agent.
pub async fn admit_writes_run_admitted_as_seq_one<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
    let run = journal.admit(team, agent, t(1)).await.unwrap();
    let records = journal.read(run, Seq(1), 10).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].run, run);
    assert_eq!(records[0].seq, Seq::FIRST);
    assert_eq!(records[0].at, t(1));
    assert_eq!(records[0].kind, RecordKind::RunAdmitted { team, agent });
    let info = journal.run(run).await.unwrap();
    assert_eq!((info.id, info.team, info.agent), (run, team, agent));
    assert_eq!(info.admitted_at, t(1));
    assert_eq!(info.last_seq, Seq(1));
    assert!(!info.is_sealed());
    let other = journal.admit(team, agent, t(1)).await.unwrap();
    assert_ne!(run, other, "every admission mints a new run");
}

/// Every append takes the next seq: 1, 2, 3, … with no gap, and returns it.
pub async fn records_are_gap_free_from_one<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let run = journal
        .admit(Uuid::new_v4(), Uuid::new_v4(), t(0))
        .await
        .unwrap();
    assert_eq!(journal.note(run, "one", t(1)).await.unwrap(), Seq(2));
    assert_eq!(journal.resume(run, t(2)).await.unwrap(), Seq(3));
    assert_eq!(journal.note(run, "two", t(3)).await.unwrap(), Seq(4));
    assert_eq!(
        journal
            .seal(run, RunOutcome::Succeeded, "done", t(4))
            .await
            .unwrap(),
        Seq(5)
    );
    let records = journal.read(run, Seq(1), 100).await.unwrap();
    let seqs: Vec<u64> = records.iter().map(|r| r.seq.0).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    assert_eq!(records[1].kind, RecordKind::Note { text: "one".into() });
    assert_eq!(records[2].kind, RecordKind::RunResumed);
    assert_eq!(
        records[4].kind,
        RecordKind::RunSealed {
            outcome: RunOutcome::Succeeded,
            reason: "done".into()
        }
    );
    assert_eq!(journal.run(run).await.unwrap().last_seq, Seq(5));
}

/// After `RunSealed` nothing is appended: notes, resumes and a second seal are `Conflict`, and
/// the seal stays the last record.
pub async fn nothing_is_appended_after_the_seal<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let run = journal
        .admit(Uuid::new_v4(), Uuid::new_v4(), t(0))
        .await
        .unwrap();
    journal
        .seal(run, RunOutcome::Failed, "crashed", t(1))
        .await
        .unwrap();
    assert!(matches!(
        journal.note(run, "late", t(2)).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        journal
            .seal(run, RunOutcome::Succeeded, "again", t(2))
            .await,
        Err(StoreError::Conflict { .. })
    ));
    let records = journal.read(run, Seq(1), 100).await.unwrap();
    assert_eq!(records.len(), 2);
    assert!(records[1].kind.is_terminal());
    let info = journal.run(run).await.unwrap();
    assert_eq!(info.sealed, Some((t(1), RunOutcome::Failed)));
}

/// Resuming an open run writes `RunResumed`; resuming a sealed one is `Conflict`.
pub async fn resume_of_a_sealed_run_is_refused<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let run = journal
        .admit(Uuid::new_v4(), Uuid::new_v4(), t(0))
        .await
        .unwrap();
    assert_eq!(journal.resume(run, t(1)).await.unwrap(), Seq(2));
    journal
        .seal(run, RunOutcome::Cancelled, "stopped", t(2))
        .await
        .unwrap();
    assert!(matches!(
        journal.resume(run, t(3)).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(journal.read(run, Seq(1), 100).await.unwrap().len(), 3);
}

/// `read(run, from_seq, limit)` returns up to `limit` records from `from_seq`, ascending; past
/// the end is empty; a limit of 0 is `Invalid`.
pub async fn read_pages_from_a_seq<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let run = journal
        .admit(Uuid::new_v4(), Uuid::new_v4(), t(0))
        .await
        .unwrap();
    for i in 0..9 {
        journal.note(run, &format!("n{i}"), t(i + 1)).await.unwrap();
    }
    let mut from = Seq(1);
    let mut seen = Vec::new();
    loop {
        let page = journal.read(run, from, 4).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 4);
        assert_eq!(page[0].seq, from);
        seen.extend(page.iter().map(|r| r.seq.0));
        from = page.last().unwrap().seq.next();
    }
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    let tail = journal.read(run, Seq(9), 100).await.unwrap();
    assert_eq!(
        tail.iter().map(|r| r.seq.0).collect::<Vec<_>>(),
        vec![9, 10]
    );
    assert!(journal.read(run, Seq(11), 100).await.unwrap().is_empty());
    assert!(matches!(
        journal.read(run, Seq(1), 0).await,
        Err(StoreError::Invalid { .. })
    ));
}

/// Every method names an unknown run `NotFound`.
pub async fn unknown_run_is_not_found<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let run = RunId::new();
    assert!(matches!(
        journal.resume(run, t(0)).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        journal.note(run, "x", t(0)).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        journal.seal(run, RunOutcome::Failed, "x", t(0)).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        journal.read(run, Seq(1), 10).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        journal.run(run).await,
        Err(StoreError::NotFound { .. })
    ));
}

/// Each run has its own numbering; sealing one leaves the other open.
pub async fn runs_are_independent<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let agent = Uuid::new_v4();
    let one = journal.admit(Uuid::new_v4(), agent, t(0)).await.unwrap();
    let two = journal.admit(Uuid::new_v4(), agent, t(0)).await.unwrap();
    journal.note(one, "a", t(1)).await.unwrap();
    journal.note(one, "b", t(1)).await.unwrap();
    assert_eq!(journal.note(two, "c", t(1)).await.unwrap(), Seq(2));
    journal
        .seal(one, RunOutcome::Succeeded, "done", t(2))
        .await
        .unwrap();
    assert_eq!(journal.note(two, "d", t(3)).await.unwrap(), Seq(3));
    assert!(
        journal
            .read(two, Seq(1), 10)
            .await
            .unwrap()
            .iter()
            .all(|r| r.run == two)
    );
}

/// A note or seal reason over `MAX_NOTE_LEN` bytes is `Invalid` and writes nothing.
pub async fn oversize_text_is_invalid<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let run = journal
        .admit(Uuid::new_v4(), Uuid::new_v4(), t(0))
        .await
        .unwrap();
    let big = "x".repeat(crewbus_domain::MAX_NOTE_LEN + 1);
    assert!(matches!(
        journal.note(run, &big, t(1)).await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        journal.seal(run, RunOutcome::Failed, &big, t(1)).await,
        Err(StoreError::Invalid { .. })
    ));
    let fits = "x".repeat(crewbus_domain::MAX_NOTE_LEN);
    assert_eq!(journal.note(run, &fits, t(2)).await.unwrap(), Seq(2));
    assert!(!journal.run(run).await.unwrap().is_sealed());
}

/// `runs(team, None, limit)` lists the team's runs only, newest admitted first (ties by id,
/// descending), sealed ones included, at most `limit`; a team without runs has none.
pub async fn runs_are_listed_newest_first_within_the_team<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let (team, other, agent) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let first = journal.admit(team, agent, t(1)).await.unwrap();
    let third = journal.admit(team, Uuid::new_v4(), t(3)).await.unwrap();
    let second = journal.admit(team, agent, t(2)).await.unwrap();
    let mut tied = [
        journal.admit(team, agent, t(5)).await.unwrap(),
        journal.admit(team, agent, t(5)).await.unwrap(),
    ];
    tied.sort();
    journal.admit(other, agent, t(9)).await.unwrap();
    journal
        .seal(first, RunOutcome::Succeeded, "done", t(6))
        .await
        .unwrap();
    let runs = journal.runs(team, None, 100).await.unwrap();
    let ids: Vec<RunId> = runs.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![tied[1], tied[0], third, second, first]);
    assert!(runs.iter().all(|r| r.team == team));
    assert_eq!(runs[4], journal.run(first).await.unwrap());
    assert!(runs[4].is_sealed());
    let top: Vec<RunId> = journal
        .runs(team, None, 2)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(top, vec![tied[1], tied[0]]);
    assert!(
        journal
            .runs(Uuid::new_v4(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The next page starts before the last one's `admitted_at` (exclusive); a `limit` of 0 or above
/// `MAX_PAGE` is `Invalid`.
pub async fn runs_page_before_an_admission_time<F: LedgerFixture + ?Sized>(fx: &F) {
    let journal = fx.journal();
    let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
    let mut runs = Vec::new();
    for i in 1..=5 {
        runs.push(journal.admit(team, agent, t(i)).await.unwrap());
    }
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = journal.runs(team, before, 2).await.unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.admitted_at);
        pages.push(page.iter().map(|r| r.id).collect::<Vec<_>>());
    }
    assert_eq!(
        pages,
        vec![
            vec![runs[4], runs[3]],
            vec![runs[2], runs[1]],
            vec![runs[0]]
        ]
    );
    let before_three: Vec<RunId> = journal
        .runs(team, Some(t(3)), 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(before_three, vec![runs[1], runs[0]]);
    for limit in [0, crewbus_domain::MAX_PAGE + 1] {
        assert!(matches!(
            journal.runs(team, None, limit).await,
            Err(StoreError::Invalid { .. })
        ));
    }
}
