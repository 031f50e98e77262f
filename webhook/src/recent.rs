//! A bounded memory of what was seen recently, for limits on the admission path
//! (one Event per object and reason per window; one INFO line per denied object per
//! window).
//!
//! A sighting of a key already seen within the window takes a shard's read lock and
//! one atomic add: no allocation, no shared lock, no housekeeping on the request.
//! Expired entries are swept at most once per half window, by whichever request
//! comes first after that time (one at a time), and reported with how often they
//! were seen again; a full memory is swept before it refuses to remember more.

use dashmap::DashMap;
use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// What a sighting is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sighting {
    /// Not seen within the window (now remembered, when there is room).
    First,
    /// Seen within the window (counted).
    Repeat,
}

struct Seen {
    first: Instant,
    repeats: AtomicU64,
}

/// Keys seen within a window, at most `capacity` of them.
pub struct Recent {
    window: Duration,
    capacity: usize,
    entries: DashMap<String, Seen>,
    epoch: Instant,
    /// Milliseconds after `epoch` when the next sweep is due.
    next_sweep: AtomicU64,
    sweeping: AtomicBool,
}

impl Recent {
    /// An empty memory of `capacity` keys, each kept for `window`.
    pub fn new(window: Duration, capacity: usize) -> Self {
        let epoch = Instant::now();
        Self {
            window,
            capacity,
            entries: DashMap::new(),
            epoch,
            next_sweep: AtomicU64::new(millis(window / 2)),
            sweeping: AtomicBool::new(false),
        }
    }

    /// Records a sighting of `key` at `now`. Entries that expired are handed to
    /// `expired` with how many repeats they saw (when a sweep runs, or when their
    /// key is seen again).
    pub fn see(&self, key: &str, now: Instant, mut expired: impl FnMut(&str, u64)) -> Sighting {
        if self.sweep_due(now) {
            self.sweep(now, &mut expired);
        }
        if let Some(seen) = self.entries.get(key)
            && now.saturating_duration_since(seen.first) < self.window
        {
            seen.repeats.fetch_add(1, Ordering::Relaxed);
            return Sighting::Repeat;
        }
        if !self.entries.contains_key(key) && self.entries.len() >= self.capacity {
            self.sweep(now, &mut expired);
            if self.entries.len() >= self.capacity {
                return Sighting::First;
            }
        }
        let fresh = Seen {
            first: now,
            repeats: AtomicU64::new(0),
        };
        match self.entries.entry(key.to_owned()) {
            dashmap::Entry::Occupied(mut e) => {
                // Seen again by another request meanwhile, or expired.
                if now.saturating_duration_since(e.get().first) < self.window {
                    e.get().repeats.fetch_add(1, Ordering::Relaxed);
                    return Sighting::Repeat;
                }
                let old = e.insert(fresh);
                expired(key, old.repeats.into_inner());
            }
            dashmap::Entry::Vacant(v) => {
                v.insert(fresh);
            }
        }
        Sighting::First
    }

    /// How often `key` was seen again in its window, when it is remembered.
    pub fn repeats(&self, key: &str) -> Option<u64> {
        self.entries
            .get(key)
            .map(|s| s.repeats.load(Ordering::Relaxed))
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn sweep_due(&self, now: Instant) -> bool {
        millis(now.saturating_duration_since(self.epoch)) >= self.next_sweep.load(Ordering::Relaxed)
    }

    /// Forgets expired entries (one sweeper at a time; others go on).
    fn sweep(&self, now: Instant, expired: &mut impl FnMut(&str, u64)) {
        if self
            .sweeping
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        self.entries.retain(|k, seen| {
            let keep = now.saturating_duration_since(seen.first) < self.window;
            if !keep {
                expired(k, seen.repeats.load(Ordering::Relaxed));
            }
            keep
        });
        let next = millis(now.saturating_duration_since(self.epoch) + self.window / 2);
        self.next_sweep.store(next, Ordering::Relaxed);
        self.sweeping.store(false, Ordering::Release);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(10);

    fn no_expiry(k: &str, n: u64) {
        panic!("nothing should expire yet: {k} ({n})");
    }

    #[test]
    fn a_key_is_first_once_per_window_and_its_repeats_are_reported_when_it_expires() {
        let r = Recent::new(WINDOW, 10);
        let t0 = Instant::now();
        assert_eq!(r.see("a", t0, no_expiry), Sighting::First);
        assert_eq!(
            r.see("a", t0 + Duration::from_secs(1), no_expiry),
            Sighting::Repeat
        );
        assert_eq!(
            r.see("a", t0 + Duration::from_secs(9), no_expiry),
            Sighting::Repeat
        );
        assert_eq!(
            r.see("b", t0 + Duration::from_secs(2), no_expiry),
            Sighting::First
        );
        let mut reported = Vec::new();
        // After the window "a" is new again; the sweep (due after half a window)
        // reports both expired entries with their repeats.
        let later = t0 + Duration::from_secs(15);
        assert_eq!(
            r.see("a", later, |k, n| reported.push((k.to_owned(), n))),
            Sighting::First
        );
        reported.sort();
        assert_eq!(reported, vec![("a".to_owned(), 2), ("b".to_owned(), 0)]);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn an_expired_key_seen_again_before_a_sweep_reports_its_repeats() {
        let r = Recent::new(WINDOW, 10);
        let t0 = Instant::now();
        assert_eq!(r.see("a", t0, no_expiry), Sighting::First);
        assert_eq!(r.see("a", t0, no_expiry), Sighting::Repeat);
        // Mark the sweep as not due so the re-sighting itself finds the old entry.
        r.next_sweep.store(u64::MAX, Ordering::Relaxed);
        let mut reported = Vec::new();
        let later = t0 + Duration::from_secs(11);
        assert_eq!(
            r.see("a", later, |k, n| reported.push((k.to_owned(), n))),
            Sighting::First
        );
        assert_eq!(reported, vec![("a".to_owned(), 1)]);
        assert_eq!(r.see("a", later, no_expiry), Sighting::Repeat);
    }

    #[test]
    fn a_full_memory_makes_room_from_expired_keys_and_otherwise_remembers_nothing_more() {
        let r = Recent::new(WINDOW, 2);
        let t0 = Instant::now();
        r.next_sweep.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(r.see("a", t0, no_expiry), Sighting::First);
        assert_eq!(
            r.see("b", t0 + Duration::from_secs(5), no_expiry),
            Sighting::First
        );
        // Full, nothing expired: "c" is first every time and not remembered.
        let t1 = t0 + Duration::from_secs(6);
        assert_eq!(r.see("c", t1, no_expiry), Sighting::First);
        assert_eq!(r.see("c", t1, no_expiry), Sighting::First);
        assert_eq!(r.len(), 2);
        // Once "a" expires, the full memory sweeps it and remembers "c".
        let t2 = t0 + Duration::from_secs(11);
        let mut reported = Vec::new();
        assert_eq!(
            r.see("c", t2, |k, n| reported.push((k.to_owned(), n))),
            Sighting::First
        );
        assert_eq!(reported, vec![("a".to_owned(), 0)]);
        assert_eq!(r.see("c", t2, no_expiry), Sighting::Repeat);
        assert_eq!(r.len(), 2);
    }
}
