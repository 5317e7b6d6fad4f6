//! The room for message bodies: the most bytes of bodies that all fetches of this process hold
//! in memory at once (`bus.max_body_bytes_in_flight`).
//!
//! A fetch reserves room for the bodies it is about to read — their lengths as the ledger
//! records them (`Message::body_len`, UTF-8 bytes) — **before** it reads them, and keeps the
//! reservation ([`HeldBodies`]) until its answer has been handed over: the HTTP fetch until the
//! last byte of its JSON answer was taken by the connection, the MCP tool until its result is
//! built. What does not fit is not read and not handed out (the caller's next fetch gets it).
//!
//! # Waiting
//! A fetch that holds no room yet and finds none for its first body waits for it until its
//! deadline or the bus's shutdown ([`BodyRoom::reserve`]); a fetch that holds room already never
//! waits for more (no fetch holds room while it waits, so waits cannot deadlock), it answers
//! what it holds. Room is handed to waiters in the order they began to wait (a Tokio semaphore
//! is fair), so a stream of small fetches cannot starve a large one.
//!
//! # Units
//! Room is counted in KiB (a body's length rounded up to whole KiB) so a reservation of any
//! size fits the semaphore's `u32` permits; the configured bound is rounded down to whole KiB.
//! A single reservation is at most the whole room, so one body always fits (the room is at
//! least one body, 1 MiB, by configuration).

use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// Bytes per permit of the room's semaphore.
const UNIT: u64 = 1024;

/// The room for bodies of one process (see the module docs).
#[derive(Debug)]
pub struct BodyRoom {
    permits: Arc<Semaphore>,
    /// The whole room, in permits.
    capacity: u32,
    /// Bytes reserved now (the `crewbus_fetch_bodies_in_flight_bytes` gauge).
    in_flight: Gauge,
}

/// Room held by one fetch: released when dropped (so when its answer, which owns it, is
/// dropped).
#[derive(Debug, Default)]
pub struct HeldBodies {
    permit: Option<OwnedSemaphorePermit>,
    /// Bytes reserved (the bodies' recorded lengths, not rounded).
    bytes: u64,
    in_flight: Option<Gauge>,
}

impl HeldBodies {
    /// Bytes of bodies this reservation holds room for (the bodies' recorded lengths).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn add(&mut self, permit: OwnedSemaphorePermit, bytes: u64, gauge: &Gauge) {
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
        self.bytes += bytes;
        gauge.inc_by(i64::try_from(bytes).unwrap_or(i64::MAX));
        self.in_flight.get_or_insert_with(|| gauge.clone());
    }
}

impl Drop for HeldBodies {
    fn drop(&mut self) {
        if let Some(gauge) = &self.in_flight {
            gauge.dec_by(i64::try_from(self.bytes).unwrap_or(i64::MAX));
        }
    }
}

/// Permits for `bytes`, at most `capacity`.
fn permits_for(bytes: u64, capacity: u32) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).map_or(capacity, |p| p.min(capacity))
}

impl BodyRoom {
    /// A room of `bytes` (rounded down to whole KiB, at least one KiB), reporting what is
    /// reserved in `in_flight`.
    pub fn new(bytes: u64, in_flight: Gauge) -> Self {
        let capacity = u32::try_from(bytes / UNIT).unwrap_or(u32::MAX).max(1);
        BodyRoom {
            permits: Arc::new(Semaphore::new(capacity as usize)),
            capacity,
            in_flight,
        }
    }

    /// Bytes of room free now (whole KiB).
    pub fn free(&self) -> u64 {
        self.permits.available_permits() as u64 * UNIT
    }

    /// Reserves room in `held` for the longest prefix of `costs` (each a body's length in
    /// bytes, in the order the fetch would hand them out; 0 for nothing to read) that fits, and
    /// returns its length (0 to `costs.len()`).
    ///
    /// Takes what is free now, in order, up to the first cost that does not fit. When that is
    /// the first one with a cost and `held` holds nothing, waits until `deadline` or `shutdown`
    /// for room for all of them, or as many as the whole room holds (counted in
    /// `metrics.fetch_bytes_waits`): under contention an answer then comes whole rather than
    /// body by body, each body costing its own round trip and writes. A deadline or shutdown
    /// passed first takes only what is free then (often nothing). A shorter prefix than `costs`
    /// is counted in `metrics.fetch_bytes_shortened`.
    ///
    /// Room is taken per body (each rounded up to whole KiB) when it is free, and as one sum
    /// when waited for; either way a holder gives back exactly what it took.
    pub(crate) async fn reserve(
        &self,
        held: &mut HeldBodies,
        costs: &[u64],
        deadline: Instant,
        shutdown: &Shutdown,
        metrics: &Metrics,
    ) -> usize {
        let mut kept = self.take_free(held, costs);
        if kept < costs.len() && held.permit.is_none() {
            // Nothing held, and the first cost does not fit: wait for room for them all, or for
            // as many as the whole room holds (at least the first).
            let whole = u64::from(self.capacity) * UNIT;
            let (mut cost, mut wait_for) = (0u64, kept);
            for &c in &costs[kept..] {
                if wait_for > kept && cost + c > whole {
                    break;
                }
                cost += c;
                wait_for += 1;
            }
            Metrics::inc(&metrics.fetch_bytes_waits);
            let wanted = permits_for(cost, self.capacity);
            let acquired = tokio::select! {
                permit = Arc::clone(&self.permits).acquire_many_owned(wanted) => permit.ok(),
                () = tokio::time::sleep_until(deadline) => None,
                () = shutdown.wait() => None,
            };
            match acquired {
                Some(permit) => {
                    held.add(permit, cost, &self.in_flight);
                    kept = wait_for;
                }
                None => kept += self.take_free(held, &costs[kept..]),
            }
        }
        if kept < costs.len() {
            Metrics::inc(&metrics.fetch_bytes_shortened);
        }
        kept
    }

    /// Takes room for the leading `costs` that fit now, without waiting; returns how many.
    fn take_free(&self, held: &mut HeldBodies, costs: &[u64]) -> usize {
        for (i, &cost) in costs.iter().enumerate() {
            if cost == 0 {
                continue;
            }
            match Arc::clone(&self.permits).try_acquire_many_owned(permits_for(cost, self.capacity))
            {
                Ok(permit) => held.add(permit, cost, &self.in_flight),
                Err(_) => return i,
            }
        }
        costs.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn room(bytes: u64) -> (BodyRoom, Gauge) {
        let gauge = Gauge::default();
        (BodyRoom::new(bytes, gauge.clone()), gauge)
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[tokio::test]
    async fn what_fits_is_reserved_in_order_and_released_when_dropped() {
        let (room, gauge) = room(4 * MIB);
        let metrics = Metrics::default();
        let shutdown = Shutdown::new();
        let mut held = HeldBodies::default();
        // 1 + 2 MiB fit, the next 2 MiB do not: a prefix of two, without waiting.
        let costs = [MIB, 0, 2 * MIB, 2 * MIB, 1];
        let kept = room
            .reserve(&mut held, &costs, soon(10_000), &shutdown, &metrics)
            .await;
        assert_eq!(kept, 3);
        assert_eq!(held.bytes(), 3 * MIB);
        assert_eq!(gauge.get(), (3 * MIB) as i64);
        assert_eq!(room.free(), MIB);
        assert_eq!(metrics.fetch_bytes_waits.get(), 0);
        assert_eq!(metrics.fetch_bytes_shortened.get(), 1);
        drop(held);
        assert_eq!(gauge.get(), 0);
        assert_eq!(room.free(), 4 * MIB);
    }

    #[tokio::test]
    async fn a_fetch_holding_nothing_waits_for_room_and_gets_it_when_released() {
        let (room, gauge) = room(2 * MIB);
        let room = Arc::new(room);
        let metrics = Arc::new(Metrics::default());
        let shutdown = Shutdown::new();
        let mut first = HeldBodies::default();
        let kept = room
            .reserve(&mut first, &[2 * MIB], soon(10_000), &shutdown, &metrics)
            .await;
        assert_eq!(kept, 1);
        let waiting = {
            let (room, metrics, shutdown) = (room.clone(), metrics.clone(), shutdown.clone());
            tokio::spawn(async move {
                let mut held = HeldBodies::default();
                let kept = room
                    .reserve(&mut held, &[MIB, MIB], soon(10_000), &shutdown, &metrics)
                    .await;
                (kept, held)
            })
        };
        // It waits (counted) until the first fetch's room is released.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while metrics.fetch_bytes_waits.get() == 0 {
            assert!(std::time::Instant::now() < deadline, "never waited");
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished());
        drop(first);
        let (kept, held) = waiting.await.unwrap();
        assert_eq!(kept, 2);
        assert_eq!(gauge.get(), (2 * MIB) as i64);
        drop(held);
        assert_eq!(gauge.get(), 0);
    }

    #[tokio::test]
    async fn a_wait_ends_with_nothing_at_the_deadline_or_shutdown_and_a_holder_never_waits() {
        let (room, _) = room(2 * MIB);
        let metrics = Metrics::default();
        let shutdown = Shutdown::new();
        let mut other = HeldBodies::default();
        let mut holder = HeldBodies::default();
        for held in [&mut other, &mut holder] {
            let kept = room
                .reserve(held, &[MIB], soon(10_000), &shutdown, &metrics)
                .await;
            assert_eq!(kept, 1);
        }
        assert_eq!(room.free(), 0);
        // Holding nothing: waits until the deadline, then nothing.
        let mut held = HeldBodies::default();
        let kept = room
            .reserve(&mut held, &[10], soon(20), &shutdown, &metrics)
            .await;
        assert_eq!(kept, 0);
        assert_eq!(held.bytes(), 0);
        assert_eq!(metrics.fetch_bytes_waits.get(), 1);
        // Holding room already: answers at once (its deadline is far) with what it holds.
        let kept = room
            .reserve(&mut holder, &[10], soon(600_000), &shutdown, &metrics)
            .await;
        assert_eq!(kept, 0);
        assert_eq!(holder.bytes(), MIB);
        assert_eq!(metrics.fetch_bytes_waits.get(), 1, "a holder does not wait");
        // A shutdown ends a wait at once.
        shutdown.trigger();
        let mut held = HeldBodies::default();
        let kept = room
            .reserve(&mut held, &[10], soon(600_000), &shutdown, &metrics)
            .await;
        assert_eq!(kept, 0);
        assert_eq!(metrics.fetch_bytes_waits.get(), 2);
        assert_eq!(metrics.fetch_bytes_shortened.get(), 3);
    }

    #[tokio::test]
    async fn a_waiting_fetch_waits_for_room_for_its_whole_answer_and_at_most_the_room() {
        let (room, _) = room(2 * MIB);
        let room = Arc::new(room);
        let metrics = Arc::new(Metrics::default());
        let shutdown = Shutdown::new();
        let (mut a, mut b) = (HeldBodies::default(), HeldBodies::default());
        for held in [&mut a, &mut b] {
            let kept = room
                .reserve(held, &[MIB], soon(10_000), &shutdown, &metrics)
                .await;
            assert_eq!(kept, 1);
        }
        // Three bodies wanted, the room holds two: it waits for two, not for one.
        let waiting = {
            let (room, metrics, shutdown) = (room.clone(), metrics.clone(), shutdown.clone());
            tokio::spawn(async move {
                let mut held = HeldBodies::default();
                let costs = [MIB, MIB, MIB];
                let kept = room
                    .reserve(&mut held, &costs, soon(10_000), &shutdown, &metrics)
                    .await;
                (kept, held.bytes())
            })
        };
        for _ in 0..10_000 {
            if metrics.fetch_bytes_waits.get() > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(metrics.fetch_bytes_waits.get(), 1, "never waited");
        // One body's room back is not enough (this runtime has one thread: the waiter runs
        // whenever this task yields).
        drop(a);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "answered with one body");
        drop(b);
        let (kept, bytes) = waiting.await.unwrap();
        assert_eq!((kept, bytes), (2, 2 * MIB));
        assert_eq!(metrics.fetch_bytes_shortened.get(), 1);
    }

    #[tokio::test]
    async fn a_body_larger_than_the_room_takes_the_whole_room() {
        let (room, _) = room(MIB);
        let metrics = Metrics::default();
        let mut held = HeldBodies::default();
        let kept = room
            .reserve(
                &mut held,
                &[3 * MIB],
                soon(10_000),
                &Shutdown::new(),
                &metrics,
            )
            .await;
        assert_eq!(kept, 1);
        assert_eq!(room.free(), 0);
    }
}
