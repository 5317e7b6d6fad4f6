//! The benches' one way to record durations and read their percentiles: an HDR histogram
//! (`hdrhistogram`, 3 significant digits, nanoseconds).
//!
//! Percentiles are nearest-rank: `p99` is the smallest recorded value with at least 99 % of the
//! samples at or below it. The histogram reports each value as the highest value equivalent to
//! it at 3 significant digits: at most 0.1 % above the sample itself (1 µs at 1 ms), the same
//! for `max`.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Significant digits every histogram keeps.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Durations recorded for one target (a sample each).
#[derive(Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies::new()
    }
}

impl Latencies {
    pub fn new() -> Latencies {
        Latencies(Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits"))
    }

    /// Records one sample (to the nanosecond; the histogram grows to hold any duration).
    pub fn record(&mut self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.0
            .record(nanos)
            .expect("an auto-resizing histogram holds any value");
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        self.0.add(&other.0).expect("histograms that resize");
    }

    /// Samples recorded.
    pub fn len(&self) -> usize {
        self.0.len() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The nearest-rank percentile `q` (0–1]; panics with no sample.
    pub fn percentile(&self, q: f64) -> Duration {
        assert!(!self.is_empty(), "a percentile of no samples");
        Duration::from_nanos(self.0.value_at_quantile(q))
    }

    pub fn p50(&self) -> Duration {
        self.percentile(0.50)
    }

    pub fn p99(&self) -> Duration {
        self.percentile(0.99)
    }

    /// The largest sample; panics with none.
    pub fn max(&self) -> Duration {
        assert!(!self.is_empty(), "the largest of no samples");
        Duration::from_nanos(self.0.max())
    }

    /// Samples, p50, p99 and max; panics with no sample.
    pub fn figures(&self) -> Figures {
        Figures {
            samples: self.len(),
            p50: self.p50(),
            p99: self.p99(),
            max: self.max(),
        }
    }
}

impl Extend<Duration> for Latencies {
    fn extend<I: IntoIterator<Item = Duration>>(&mut self, samples: I) {
        for d in samples {
            self.record(d);
        }
    }
}

impl FromIterator<Duration> for Latencies {
    fn from_iter<I: IntoIterator<Item = Duration>>(samples: I) -> Latencies {
        let mut l = Latencies::new();
        l.extend(samples);
        l
    }
}

/// p50 / p99 / max of one target's samples.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    pub samples: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
