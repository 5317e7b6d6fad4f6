//! The room for message bodies: the most bytes of bodies that all fetches of this process hold
//! in memory at once (`bus.max_body_bytes_in_flight`), counted as the bodies' size **as JSON
//! strings in the answer** ([`json_len`]: serde_json's escaping, so a body of control
//! characters counts up to six times its UTF-8 length).
//!
//! A fetch reserves room for the bodies it is about to read **before** it reads them — their
//! lengths as the ledger records them (`Message::body_len`, UTF-8 bytes), or the size as JSON
//! this process learnt when it read the body before — and, once a body is read and before its
//! hand-out is recorded, tops that reservation up to the body's size as JSON without waiting
//! ([`BodyRoom::top_up`]). A body whose top-up does not fit is not handed out: its reservation
//! is given back ([`BodyRoom::release`]) and it is left for the caller's next fetch like a body
//! that found no room, with its size as JSON remembered so the next fetch reserves (and, holding
//! nothing, waits for) all of it at once. The reservation ([`HeldBodies`]) is kept until the
//! answer has been handed over: the HTTP fetch until the last byte of its JSON answer was taken
//! by the connection, the MCP tool until its result is built. What does not fit is not read
//! and not handed out (the caller's next fetch gets it).
//!
//! # Waiting
//! A fetch that holds no room yet and finds none for its first body waits for it until its
//! deadline or the bus's shutdown ([`BodyRoom::reserve`]); a fetch that holds room already never
//! waits for more (no fetch holds room while it waits, so waits cannot deadlock), it answers
//! what it holds; a top-up never waits. Room is handed to waiters in the order they began to
//! wait (a Tokio semaphore is fair), so a stream of small fetches cannot starve a large one.
//!
//! # No starvation by the top-up
//! A first body whose top-up does not fit would, reserved again at its recorded length, be read
//! and left again as long as the room stays busy. So its size as JSON is what it is reserved at
//! from then on: the same fetch, holding nothing once it gave the reservation back, reserves
//! again at once at that size — waiting for it, in turn, like any fetch holding nothing — and
//! reads the body again (a second read, only under contention); a body left behind a first
//! one carries its size to the next fetch. A body's second reservation therefore never needs a
//! top-up, and it waits for room as fairly as any other.
//!
//! # Units
//! Room is counted in KiB (each body's size rounded up to whole KiB) so a reservation of any
//! size fits the semaphore's `u32` permits; the configured bound is rounded down to whole KiB.
//! A single body's reservation is at most the whole room, so one body always fits (the room is
//! at least one body, 1 MiB, by configuration), however large it is as JSON.

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
    /// Bytes reserved (the bodies' sizes, not rounded).
    bytes: u64,
    in_flight: Option<Gauge>,
}

impl HeldBodies {
    /// Bytes of bodies this reservation holds room for: each body's size as JSON once it was
    /// read and topped up ([`BodyRoom::top_up`]), its recorded length before.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gives back `permits` of the held ones (at most all) and `bytes` of the held bytes.
    fn remove(&mut self, permits: u32, bytes: u64) {
        if let Some(held) = &mut self.permit {
            let n = (permits as usize).min(held.num_permits());
            if n == held.num_permits() {
                self.permit = None;
            } else {
                drop(held.split(n));
            }
        }
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        if let Some(gauge) = &self.in_flight {
            gauge.dec_by(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    fn add(&mut self, permit: OwnedSemaphorePermit, bytes: u64, gauge: &Gauge) {
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
        self.grow(bytes, gauge);
    }

    /// Counts `bytes` more as held (room for them is held already).
    fn grow(&mut self, bytes: u64, gauge: &Gauge) {
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

/// Extra bytes serde_json writes for each byte of a string beyond the byte itself: `"`, `\\`
/// and the five control characters with a short escape (`\b \f \n \r \t`) take 2 bytes, the
/// other characters below U+0020 take 6 (`\u00XX`), everything else is written as it is.
const ESCAPE_EXTRA: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = 5;
        b += 1;
    }
    t[b'"' as usize] = 1;
    t[b'\\' as usize] = 1;
    t[0x08] = 1;
    t[0x0c] = 1;
    t[b'\n' as usize] = 1;
    t[b'\r' as usize] = 1;
    t[b'\t' as usize] = 1;
    t
};

/// Bytes `s` takes in a JSON answer as serde_json writes it, without its two quotes
/// (`serde_json::to_string(s).len() - 2`): its UTF-8 length plus its escapes' extra bytes.
pub(crate) fn json_len(s: &str) -> u64 {
    let extra: u64 = s.bytes().map(|b| u64::from(ESCAPE_EXTRA[b as usize])).sum();
    s.len() as u64 + extra
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
    /// Room is taken per body (each rounded up to whole KiB, at most the whole room), when it
    /// is free one at a time, when waited for as one sum of the same amounts; either way a
    /// holder gives back exactly what it took, and one body's room can be topped up
    /// ([`BodyRoom::top_up`]) or given back ([`BodyRoom::release`]) alone.
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
            // Each body's permits as `take_free` counts them, so a body's reservation can be
            // given back or topped up alone.
            let (mut cost, mut wanted, mut wait_for) = (0u64, 0u32, kept);
            for &c in &costs[kept..] {
                let p = if c == 0 {
                    0
                } else {
                    permits_for(c, self.capacity)
                };
                if wait_for > kept && wanted + p > self.capacity {
                    break;
                }
                cost += c;
                wanted += p;
                wait_for += 1;
            }
            Metrics::inc(&metrics.fetch_bytes_waits);
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

    /// Grows the room `held` holds for one body from `reserved` bytes (what [`BodyRoom::reserve`]
    /// took for it) to `needed` (its size as JSON, [`json_len`]), without waiting: true when
    /// the extra room was free (or none was needed), false when not (nothing changes then).
    /// As for a reservation, a body's room is at most the whole room.
    pub(crate) fn top_up(&self, held: &mut HeldBodies, reserved: u64, needed: u64) -> bool {
        if needed <= reserved {
            return true;
        }
        let extra = permits_for(needed, self.capacity) - permits_for(reserved, self.capacity);
        if extra == 0 {
            held.grow(needed - reserved, &self.in_flight);
            return true;
        }
        match Arc::clone(&self.permits).try_acquire_many_owned(extra) {
            Ok(permit) => {
                held.add(permit, needed - reserved, &self.in_flight);
                true
            }
            Err(_) => false,
        }
    }

    /// Gives back the room `held` holds for one body reserved at `reserved` bytes (by
    /// [`BodyRoom::reserve`], or topped up to it by [`BodyRoom::top_up`]); the rest stays held.
    pub(crate) fn release(&self, held: &mut HeldBodies, reserved: u64) {
        if reserved == 0 {
            return;
        }
        held.remove(permits_for(reserved, self.capacity), reserved);
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

    /// Strings covering every character below U+0080 alone and in runs, some non-ASCII ones,
    /// and mixes of them drawn by a fixed pseudo-random sequence.
    fn strings() -> Vec<String> {
        let mut all: Vec<String> = vec![String::new()];
        let alphabet: Vec<char> = (0u8..0x80)
            .map(char::from)
            .chain([
                '\u{80}', '\u{7ff}', 'é', '\u{2028}', '\u{2029}', '\u{fffd}', '😀',
            ])
            .collect();
        for &c in &alphabet {
            all.push(c.to_string());
            all.push(c.to_string().repeat(7));
        }
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let len = (state >> 33) as usize % 64;
            let mut s = String::new();
            for _ in 0..len {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                s.push(alphabet[(state >> 33) as usize % alphabet.len()]);
            }
            all.push(s);
        }
        all
    }

    #[test]
    fn json_len_is_the_length_serde_json_writes_without_the_quotes() {
        for s in strings() {
            let written = serde_json::to_string(&s).unwrap().len() as u64 - 2;
            assert_eq!(json_len(&s), written, "{s:?}");
        }
        // A control character takes six bytes, a short escape two.
        assert_eq!(json_len(&"\u{1}".repeat(1024)), 6 * 1024);
        assert_eq!(json_len("\n\"\\"), 6);
    }

    #[tokio::test]
    async fn a_top_up_takes_free_room_without_waiting_and_a_release_gives_one_body_back() {
        let (room, gauge) = room(8 * MIB);
        let metrics = Metrics::default();
        let shutdown = Shutdown::new();
        let mut held = HeldBodies::default();
        let kept = room
            .reserve(&mut held, &[MIB, MIB], soon(10_000), &shutdown, &metrics)
            .await;
        assert_eq!(kept, 2);
        // The first body is 6 MiB as JSON: it fits (2 + 5 MiB of 8).
        assert!(room.top_up(&mut held, MIB, 6 * MIB));
        assert_eq!(held.bytes(), 7 * MIB);
        assert_eq!(gauge.get(), (7 * MIB) as i64);
        assert_eq!(room.free(), MIB);
        // The second's top-up to 6 MiB does not fit: nothing changes, and it is given back.
        assert!(!room.top_up(&mut held, MIB, 6 * MIB));
        assert_eq!(held.bytes(), 7 * MIB);
        assert_eq!(room.free(), MIB);
        room.release(&mut held, MIB);
        assert_eq!(held.bytes(), 6 * MIB);
        assert_eq!(gauge.get(), (6 * MIB) as i64);
        assert_eq!(room.free(), 2 * MIB);
        // A top-up needing no more than was reserved changes nothing.
        assert!(room.top_up(&mut held, 6 * MIB, 6 * MIB));
        room.release(&mut held, 6 * MIB);
        assert_eq!(held.bytes(), 0);
        assert_eq!(gauge.get(), 0);
        assert_eq!(room.free(), 8 * MIB);
        drop(held);
        assert_eq!(gauge.get(), 0);
        assert_eq!(metrics.fetch_bytes_waits.get(), 0);
    }

    #[tokio::test]
    async fn a_top_up_of_a_body_larger_than_the_room_is_capped_at_the_whole_room() {
        let (room, gauge) = room(2 * MIB);
        let metrics = Metrics::default();
        let mut held = HeldBodies::default();
        let kept = room
            .reserve(&mut held, &[MIB], soon(10_000), &Shutdown::new(), &metrics)
            .await;
        assert_eq!(kept, 1);
        // 6 MiB as JSON in a 2 MiB room: it takes the whole room, and counts its size.
        assert!(room.top_up(&mut held, MIB, 6 * MIB));
        assert_eq!(room.free(), 0);
        assert_eq!(gauge.get(), (6 * MIB) as i64);
        room.release(&mut held, 6 * MIB);
        assert_eq!(room.free(), 2 * MIB);
        assert_eq!(gauge.get(), 0);
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
