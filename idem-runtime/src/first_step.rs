//! Which step a keyed execution begins with, learnt per operation from the executions before
//! it.
//!
//! An execution looks its key up first: a replay costs that one round trip. Where the key's
//! lock tells a key whose row exists ([`Dialect::lock_first`]: PostgreSQL, where `BEGIN`, the
//! lock and the look at its row again are one round trip that fails; MySQL, where the lock
//! row's transaction looks again and rolls back), a new key can skip the lookup and begin with
//! the lock: a first execution saves a round trip. A key that exists costs more then (the
//! lock's round trips wasted, its `ROLLBACK`, then the lookup: [`Dialect::lock_first_miss`],
//! two on PostgreSQL, four on MySQL), so the lock comes first only for an operation whose
//! recent keys were mostly new: one existing key counts as much as that many new ones, the
//! break-even of one round trip saved against those lost (more than two keys in three new on
//! PostgreSQL, four in five on MySQL). An operation begins with the lookup until a new key
//! was seen.
//!
//! Either order gives the same answers: the lock's look again refuses a key whose row
//! exists, and the lookup's path follows (`Idem::execute`).
//!
//! [`Dialect::lock_first`]: crate::store::Dialect::lock_first
//! [`Dialect::lock_first_miss`]: crate::store::Dialect::lock_first_miss

use std::hash::{DefaultHasher, Hasher as _};
use std::sync::atomic::{AtomicI8, Ordering};

/// How many operations have a score of their own; operations beyond share (a wrong guess
/// costs round trips, never an answer).
const SLOTS: usize = 64;
/// The score's bounds: how many executions it takes, at most, to turn a guess around.
const BOUND: i8 = 16;

/// Per operation, a score of the keys its executions met: each existing key adds `miss`, each
/// new key takes 1 away; below zero, the key's lock comes first.
pub(crate) struct FirstStep {
    scores: [AtomicI8; SLOTS],
    miss: i8,
}

impl FirstStep {
    /// Scores where a key found to exist after the lock came first cost `miss` round trips
    /// more than the lookup would have
    /// ([`Dialect::lock_first_miss`](crate::store::Dialect::lock_first_miss)).
    pub(crate) fn new(miss: i8) -> Self {
        Self {
            scores: std::array::from_fn(|_| AtomicI8::new(0)),
            miss,
        }
    }

    /// Whether the next execution of `operation` should begin with the key's lock.
    pub(crate) fn lock_first(&self, operation: &str) -> bool {
        self.score(operation).load(Ordering::Relaxed) < 0
    }

    /// An execution of `operation` found its key's row (`true`) or found it new.
    pub(crate) fn met(&self, operation: &str, existing: bool) {
        let score = self.score(operation);
        let before = score.load(Ordering::Relaxed);
        let after = if existing {
            before.saturating_add(self.miss).min(BOUND)
        } else {
            before.saturating_sub(1).max(-BOUND)
        };
        // A guess: a concurrent update lost is one execution's vote.
        if after != before {
            let _ = score.compare_exchange(before, after, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn score(&self, operation: &str) -> &AtomicI8 {
        let mut hasher = DefaultHasher::new();
        hasher.write(operation.as_bytes());
        // (The remainder is below SLOTS: the cast keeps it.)
        #[allow(clippy::cast_possible_truncation)]
        let slot = (hasher.finish() % SLOTS as u64) as usize;
        &self.scores[slot]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After 300 keys of one operation, one existing in every `every`: whether the
    /// lock comes first.
    fn lock_first_after_a_mix(miss: i8, every: usize) -> bool {
        let steps = FirstStep::new(miss);
        for i in 0..300 {
            steps.met("mix:v1", i % every == 0);
        }
        steps.lock_first("mix:v1")
    }

    /// After a long run of new keys, how many existing keys turn the lookup first again.
    fn existing_keys_to_turn_back(miss: i8) -> usize {
        let steps = FirstStep::new(miss);
        for _ in 0..100 {
            steps.met("orders:v1", false);
        }
        (1..=100)
            .find(|_| {
                steps.met("orders:v1", true);
                !steps.lock_first("orders:v1")
            })
            .unwrap_or(usize::MAX)
    }

    #[test]
    fn new_keys_turn_the_lock_first_and_existing_keys_turn_it_back() {
        let steps = FirstStep::new(2);
        assert!(
            !steps.lock_first("orders:v1"),
            "the lookup first, to begin with"
        );
        steps.met("orders:v1", false);
        assert!(steps.lock_first("orders:v1"));
        // Bounded: eight existing keys outweigh any run of new ones.
        assert_eq!(existing_keys_to_turn_back(2), 8);
        // One existing key in three keeps the lookup first; one in four the lock.
        assert!(!lock_first_after_a_mix(2, 3));
        assert!(lock_first_after_a_mix(2, 4));
    }

    #[test]
    fn a_dearer_miss_needs_more_new_keys() {
        // MySQL's weight: one existing key in five keeps the lookup first; one in six the
        // lock; four existing keys outweigh any run of new ones.
        assert!(!lock_first_after_a_mix(4, 5));
        assert!(lock_first_after_a_mix(4, 6));
        assert_eq!(existing_keys_to_turn_back(4), 4);
    }
}
