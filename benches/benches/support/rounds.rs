//! The benches' one alternating runner: every target measured in rounds that alternate, so
//! drift, the store's growth and the neighbours' load hit every target alike; and the one tally
//! of Σ items and Σ time per target a rate is read from.

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The order each round runs its targets in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Order {
    /// Every round in the order given (on, off, on, off…).
    Same,
    /// The order turns every round, so each target runs in each place equally often: two
    /// targets swap every round (a b, b a, a b…); three go through all six orders (a b c, b c a,
    /// c a b, a c b, c b a, b a c, then again).
    Turning,
}

/// `rounds` rounds of every target: `(round, target)` in the order they are to run, round
/// `0..rounds`, the targets of each round in `order`.
pub fn rounds<T: Copy, const N: usize>(
    rounds: usize,
    targets: [T; N],
    order: Order,
) -> impl Iterator<Item = (usize, T)> {
    (0..rounds).flat_map(move |round| {
        let mut turn = targets;
        if order == Order::Turning && N > 1 {
            // The rotations of the order given, then those of the order with its tail reversed.
            if (round / N) % 2 == 1 {
                turn[1..].reverse();
            }
            turn.rotate_left(round % N);
        }
        turn.into_iter().map(move |target| (round, target))
    })
}

/// Σ items and Σ time per key (a target, or a target at a batch size), as the runs add them;
/// clones share one tally (criterion's routines add to it from their futures).
pub struct Tally<K>(Arc<Mutex<Vec<(K, u64, Duration)>>>);

impl<K> Clone for Tally<K> {
    fn clone(&self) -> Self {
        Tally(Arc::clone(&self.0))
    }
}

impl<K> Default for Tally<K> {
    fn default() -> Self {
        Tally(Arc::default())
    }
}

impl<K: PartialEq> Tally<K> {
    pub fn new() -> Tally<K> {
        Tally::default()
    }

    /// One run of `key`: `items` in `took`.
    pub fn add(&self, key: K, items: u64, took: Duration) {
        self.0.lock().expect("tally").push((key, items, took));
    }

    /// Σ items and Σ time of `key`.
    pub fn sum(&self, key: &K) -> (u64, Duration) {
        self.0
            .lock()
            .expect("tally")
            .iter()
            .filter(|(k, _, _)| k == key)
            .fold((0, Duration::ZERO), |(n, t), (_, k, d)| (n + k, t + *d))
    }

    /// Σ items of `key`.
    pub fn items(&self, key: &K) -> u64 {
        self.sum(key).0
    }

    /// Σ items ÷ Σ time of `key`, per second; `None` before any item or time.
    pub fn rate(&self, key: &K) -> Option<f64> {
        let (n, t) = self.sum(key);
        (n > 0 && !t.is_zero()).then(|| n as f64 / t.as_secs_f64())
    }
}
