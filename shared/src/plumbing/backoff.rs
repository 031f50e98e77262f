//! Exponential retry delays, for every retry loop of both binaries (watches, the
//! reconcile loop, anchor sources), with jitter: after an API-server blip, every
//! webhook replica and watch retries at its own moment, never in lockstep.

use std::time::Duration;

/// Nominal delays starting at `first`, doubling, at most `max`; each delay given
/// out is drawn uniformly from the upper half of its nominal one (`[d/2, d]`).
/// [`ExponentialBackoff::reset`] (after a success) starts over. Also an
/// [`Iterator`] of delays.
#[derive(Clone, Debug)]
pub struct ExponentialBackoff {
    first: Duration,
    max: Duration,
    next: Option<Duration>,
}

impl ExponentialBackoff {
    /// Delays from `first`, doubling, capped at `max`.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            next: None,
        }
    }

    /// The nominal delay of the next retry (before jitter).
    pub fn nominal(&self) -> Duration {
        self.next.unwrap_or(self.first).min(self.max)
    }

    /// The delay before the next retry: within `[d/2, d]` of the nominal `d`.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.nominal();
        self.next = Some(d.saturating_mul(2));
        let half = d / 2;
        let spread = u64::try_from((d - half).as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(rand::random_range(0..=spread))
    }

    /// After a success: the next delay is the first again.
    pub fn reset(&mut self) {
        self.next = None;
    }
}

impl Iterator for ExponentialBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_lie_in_the_upper_half_of_a_doubling_nominal_delay() {
        let mut b = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(1));
        for nominal in [100, 200, 400, 800, 1000, 1000].map(Duration::from_millis) {
            assert_eq!(b.nominal(), nominal);
            let d = b.next_delay();
            assert!(
                d >= nominal / 2 && d <= nominal,
                "{d:?} outside [{:?}, {nominal:?}]",
                nominal / 2
            );
        }
        b.reset();
        assert_eq!(b.nominal(), Duration::from_millis(100));
    }

    #[test]
    fn two_retriers_do_not_wait_alike() {
        // 50 draws at the cap: identical draws would mean no jitter (the chance of
        // 50 equal draws from a million microseconds is nil).
        let mut b = ExponentialBackoff::new(Duration::from_secs(2), Duration::from_secs(2));
        let draws: std::collections::BTreeSet<Duration> = (0..50).map(|_| b.next_delay()).collect();
        assert!(draws.len() > 1, "{draws:?}");
    }
}
