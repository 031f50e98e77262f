//! Exponential retry delays, for every retry loop of both binaries (watches, the
//! reconcile loop, anchor sources).

use std::time::Duration;

/// Delays starting at `first`, doubling, at most `max`; [`ExponentialBackoff::reset`]
/// (after a success) starts over. Also an [`Iterator`] of delays.
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

    /// The delay before the next retry.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next.unwrap_or(self.first).min(self.max);
        self.next = Some(d.saturating_mul(2));
        d
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
