//! Group commit for sends: one batcher task per bus queues concurrent send requests and records
//! each batch with one `Ledger::send_batch` (one transaction, one commit, one WAL flush).
//!
//! - **Linger 0**: the batcher waits for a first request, then takes whatever else is already
//!   queued — the requests that arrived while the previous batch was committing — up to
//!   [`BatchBounds`] (a count and a sum of body bytes), and commits at once. A lone request is
//!   committed alone, without waiting for company.
//! - **Answers**: each request gets its own outcome; the batch's outer `Err` (the transaction
//!   failed: nothing was written) answers every request of the batch with that error, cloned.
//! - **Nothing accepted is lost**: an answer is sent only after the commit; the batcher keeps
//!   serving its queue until the last handle of the bus is dropped (a server shutting down still
//!   answers the sends its open connections made); a request whose batch was abandoned (its
//!   commit task panicked or the runtime stopped) is answered with a retryable `Unavailable`, so
//!   an idempotent retry is safe.

use std::sync::Arc;

use crewbus_domain::{BusError, BusResult, SendRequest, Sent};
use crewbus_ports::{Clock, Ledger};
use tokio::sync::{mpsc, oneshot};

/// A queued request and where its answer goes.
type Queued = (SendRequest, oneshot::Sender<BusResult<Sent>>);

/// How large one batch may grow. A request larger than `max_bytes` on its own is committed as a
/// batch of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchBounds {
    /// Most requests per batch (1 to `MAX_PAGE`).
    pub(crate) max: usize,
    /// Most body bytes per batch (the sum of the bodies' UTF-8 lengths), at least 1.
    pub(crate) max_bytes: u64,
}

/// The handle of one bus's batcher task. Dropping every handle ends the task once its queue is
/// answered.
pub(crate) struct SendBatcher {
    queue: mpsc::Sender<Queued>,
}

impl SendBatcher {
    /// Spawns the batcher task on the current Tokio runtime. The queue holds up to
    /// `4 × bounds.max` requests; a send beyond waits for room (backpressure).
    pub(crate) fn spawn(
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
        bounds: BatchBounds,
    ) -> Self {
        let bounds = BatchBounds {
            max: bounds.max.clamp(1, crewbus_domain::MAX_PAGE),
            max_bytes: bounds.max_bytes.max(1),
        };
        let (queue, rx) = mpsc::channel(bounds.max.saturating_mul(4));
        tokio::spawn(run(rx, ledger, clock, bounds));
        SendBatcher { queue }
    }

    /// Queues `request` for the next batch and waits for its outcome: as `Ledger::send`
    /// answers it, or the batch's transaction error. Errors: the batcher gone or the batch
    /// abandoned → `Unavailable` (retryable).
    pub(crate) async fn send(&self, request: SendRequest) -> BusResult<Sent> {
        let (answer, outcome) = oneshot::channel();
        self.queue
            .send((request, answer))
            .await
            .map_err(|_| BusError::unavailable("the send batcher has stopped"))?;
        outcome
            .await
            .unwrap_or_else(|_| Err(BusError::unavailable("the send's batch was abandoned")))
    }
}

async fn run(
    mut rx: mpsc::Receiver<Queued>,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    bounds: BatchBounds,
) {
    let mut carried: Option<Queued> = None;
    loop {
        let first = match carried.take() {
            Some(queued) => queued,
            None => match rx.recv().await {
                Some(queued) => queued,
                None => return,
            },
        };
        let mut bytes = first.0.body.len() as u64;
        let mut batch = vec![first];
        while batch.len() < bounds.max {
            let Ok(next) = rx.try_recv() else { break };
            let size = next.0.body.len() as u64;
            if bytes.saturating_add(size) > bounds.max_bytes {
                carried = Some(next);
                break;
            }
            bytes += size;
            batch.push(next);
        }
        commit(&ledger, clock.now(), batch).await;
    }
}

/// Records one batch and answers each of its requests.
async fn commit(
    ledger: &Arc<dyn Ledger>,
    at: crewbus_domain::DateTime<crewbus_domain::Utc>,
    batch: Vec<Queued>,
) {
    let (requests, answers): (Vec<SendRequest>, Vec<_>) = batch.into_iter().unzip();
    let n = requests.len();
    // Its own task, so that a panic in the ledger abandons this batch only (its requests are
    // answered `Unavailable`), never the batcher.
    let ledger = Arc::clone(ledger);
    let outcome = tokio::spawn(async move { ledger.send_batch(&requests, at).await })
        .await
        .unwrap_or_else(|_| {
            Err(BusError::unavailable(
                "the send batch's commit was abandoned",
            ))
        });
    match outcome {
        Ok(outcomes) if outcomes.len() == n => {
            for (answer, outcome) in answers.into_iter().zip(outcomes) {
                let _ = answer.send(outcome);
            }
        }
        Ok(outcomes) => {
            tracing::error!(
                asked = n,
                answered = outcomes.len(),
                "the ledger answered a send batch with the wrong number of outcomes"
            );
            for answer in answers {
                let _ = answer.send(Err(BusError::unavailable(
                    "the send batch was answered incompletely",
                )));
            }
        }
        Err(e) => {
            for answer in answers {
                let _ = answer.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use chrono::TimeZone;
    use crewbus_domain::{DateTime, Message, Utc, Uuid, body_sha256};
    use crewbus_ports::MockLedger;
    use tokio::task::JoinSet;

    use super::*;

    struct Fixed;
    impl Clock for Fixed {
        fn now(&self) -> DateTime<Utc> {
            Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
        }
    }

    fn request(id: &str, body: &str) -> SendRequest {
        SendRequest {
            team: Uuid::nil(),
            conversation: Uuid::nil(),
            sender: Uuid::nil(),
            request_id: id.into(),
            body: body.into(),
            run: None,
        }
    }

    fn sent(request: &SendRequest, seq: u64) -> Sent {
        Sent {
            message: Message::pending(
                Uuid::new_v4(),
                request,
                seq,
                "memory".into(),
                body_sha256(&request.body),
                Fixed.now(),
            ),
            created: true,
        }
    }

    /// The request ids of each batch the mock ledger was asked to record, in call order.
    type Batches = Arc<Mutex<Vec<Vec<String>>>>;

    /// A mock ledger answering every batch by `answer` and recording each batch's request ids.
    fn ledger(
        answer: fn(&[SendRequest]) -> BusResult<Vec<BusResult<Sent>>>,
    ) -> (Arc<dyn Ledger>, Batches) {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&batches);
        let mut ledger = MockLedger::new();
        ledger.expect_send_batch().returning(move |requests, _| {
            seen.lock()
                .unwrap()
                .push(requests.iter().map(|r| r.request_id.clone()).collect());
            answer(requests)
        });
        (Arc::new(ledger), batches)
    }

    fn all_created(requests: &[SendRequest]) -> BusResult<Vec<BusResult<Sent>>> {
        Ok(requests
            .iter()
            .enumerate()
            .map(|(i, r)| Ok(sent(r, i as u64 + 1)))
            .collect())
    }

    /// Sends every request concurrently (queued before the batcher runs again, on the
    /// current-thread runtime) and returns the outcomes by request id.
    async fn send_all(
        batcher: Arc<SendBatcher>,
        requests: Vec<SendRequest>,
    ) -> Vec<(String, BusResult<Sent>)> {
        let mut set = JoinSet::new();
        for r in requests {
            let batcher = Arc::clone(&batcher);
            set.spawn(async move { (r.request_id.clone(), batcher.send(r).await) });
        }
        let mut out = Vec::new();
        while let Some(joined) = set.join_next().await {
            out.push(joined.expect("sender task"));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// A batcher over `ledger` at the fixed clock, bounded by `max` requests and `max_bytes`.
    fn batcher(ledger: Arc<dyn Ledger>, max: usize, max_bytes: u64) -> Arc<SendBatcher> {
        Arc::new(SendBatcher::spawn(
            ledger,
            Arc::new(Fixed),
            BatchBounds { max, max_bytes },
        ))
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_batch_in_queue_order() {
        let (ledger, batches) = ledger(all_created);
        let batcher = batcher(ledger, 64, 1 << 20);
        let requests: Vec<_> = (0..5).map(|i| request(&format!("r{i}"), "x")).collect();
        let out = send_all(batcher, requests).await;
        assert_eq!(
            *batches.lock().unwrap(),
            vec![vec!["r0", "r1", "r2", "r3", "r4"]],
            "one batch, in queue order"
        );
        for (id, outcome) in out {
            let sent = outcome.expect("created");
            assert_eq!(
                sent.message.request_id, id,
                "each caller gets its own outcome"
            );
        }
    }

    #[tokio::test]
    async fn each_request_gets_its_own_outcome() {
        fn mixed(requests: &[SendRequest]) -> BusResult<Vec<BusResult<Sent>>> {
            Ok(requests
                .iter()
                .map(|r| match r.request_id.as_str() {
                    "forbidden" => Err(BusError::forbidden("not a member")),
                    "conflict" => Err(BusError::conflict("another body")),
                    _ => Ok(sent(r, 1)),
                })
                .collect())
        }
        let (ledger, batches) = ledger(mixed);
        let batcher = batcher(ledger, 64, 1 << 20);
        let requests = vec![
            request("conflict", "x"),
            request("forbidden", "x"),
            request("good", "x"),
        ];
        let out = send_all(batcher, requests).await;
        assert_eq!(batches.lock().unwrap().len(), 1);
        assert!(matches!(out[0], (_, Err(BusError::Conflict { .. }))));
        assert!(matches!(out[1], (_, Err(BusError::Forbidden { .. }))));
        assert!(out[2].1.as_ref().is_ok_and(|s| s.created));
    }

    #[tokio::test]
    async fn the_batch_error_answers_every_request() {
        fn down(_: &[SendRequest]) -> BusResult<Vec<BusResult<Sent>>> {
            Err(BusError::unavailable("database restarting"))
        }
        let (ledger, batches) = ledger(down);
        let batcher = batcher(ledger, 64, 1 << 20);
        let requests: Vec<_> = (0..4).map(|i| request(&format!("r{i}"), "x")).collect();
        let out = send_all(batcher, requests).await;
        assert_eq!(batches.lock().unwrap().len(), 1);
        for (_, outcome) in out {
            let e = outcome.expect_err("the batch failed");
            assert!(matches!(e, BusError::Unavailable { .. }));
            assert!(e.is_retryable());
        }
    }

    #[tokio::test]
    async fn batches_are_bounded_by_count() {
        let (ledger, batches) = ledger(all_created);
        let batcher = batcher(ledger, 3, 1 << 20);
        let requests: Vec<_> = (0..7).map(|i| request(&format!("r{i}"), "x")).collect();
        let out = send_all(batcher, requests).await;
        let sizes: Vec<usize> = batches.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![3, 3, 1]);
        assert!(out.iter().all(|(_, o)| o.is_ok()));
    }

    #[tokio::test]
    async fn batches_are_bounded_by_bytes_and_a_large_body_goes_alone() {
        let (ledger, batches) = ledger(all_created);
        let batcher = batcher(ledger, 64, 25);
        let requests = vec![
            request("a", &"x".repeat(10)),
            request("b", &"x".repeat(10)),
            request("c", &"x".repeat(10)),
            request("d", &"x".repeat(100)),
            request("e", &"x".repeat(10)),
        ];
        let out = send_all(batcher, requests).await;
        assert_eq!(
            *batches.lock().unwrap(),
            vec![vec!["a", "b"], vec!["c"], vec!["d"], vec!["e"]],
            "at most 25 bytes a batch; the 100-byte body alone"
        );
        assert!(out.iter().all(|(_, o)| o.is_ok()));
    }

    #[tokio::test]
    async fn a_panicking_commit_abandons_only_its_batch() {
        fn panics_once(requests: &[SendRequest]) -> BusResult<Vec<BusResult<Sent>>> {
            if requests[0].request_id == "boom" {
                panic!("ledger bug");
            }
            all_created(requests)
        }
        let (ledger, _) = ledger(panics_once);
        let batcher = batcher(ledger, 64, 1 << 20);
        let e = batcher
            .send(request("boom", "x"))
            .await
            .expect_err("abandoned");
        assert!(matches!(e, BusError::Unavailable { .. }));
        // The mock is poisoned by its own panic and fails every later call; what matters is
        // that the batcher is still there to answer (a dead one would leave the queue closed).
        let after = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            batcher.send(request("after", "x")),
        )
        .await
        .expect("the batcher still answers");
        assert!(matches!(after, Err(BusError::Unavailable { .. })));
        assert!(!batcher.queue.is_closed(), "the batcher lives on");
    }
}
