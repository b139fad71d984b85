//! The queued request's immutable snapshot (cost, cached tokens) and its in-class ordering key.
//!
//! A request that enters a policy-class queue is described by a [`QueueSnapshot`], taken once
//! when it is queued and never recomputed while it waits, and a [`PriorityKey`] that orders it
//! inside its class (strict tier, then the FCFS or WSPT score, then enqueue order).

use crate::scheduling::types::QueuePolicy;
use std::cmp::Ordering;

/// Token accounting of one queued request, fixed at enqueue time.
///
/// `cost_tokens` is what deficit round robin charges and what WSPT weighs; the raw and cached
/// totals feed the per-worker queue limits; `uncached_tokens` (exact, may be 0) selects the
/// cache bucket.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueSnapshot {
    /// Input sequence length of the request, in tokens.
    pub raw_isl_tokens: u64,
    /// Tokens the best worker already holds, clamped to `raw_isl_tokens`.
    pub cached_tokens: u64,
    /// `raw_isl_tokens - cached_tokens`; zero when the whole prompt is cached.
    pub uncached_tokens: u64,
    /// Scheduling cost: `max(1, uncached_tokens)`, so every request costs something.
    pub cost_tokens: u64,
}

impl QueueSnapshot {
    /// Snapshot of a request with `raw_isl_tokens` input tokens of which `cached_tokens` are
    /// already cached. Cached tokens beyond the input length are ignored (clamped).
    pub fn new(raw_isl_tokens: u64, cached_tokens: u64) -> Self {
        let cached_tokens = cached_tokens.min(raw_isl_tokens);
        let uncached_tokens = raw_isl_tokens - cached_tokens;
        QueueSnapshot {
            raw_isl_tokens,
            cached_tokens,
            uncached_tokens,
            cost_tokens: uncached_tokens.max(1),
        }
    }
}

/// Position of a request inside its class: `Greater` means "dispatch first".
///
/// Order: higher `strict_priority` first, then higher `score` (IEEE total order, so the order
/// is total even for odd floats), then lower `seq` (earlier enqueue) first.
#[derive(Copy, Clone, Debug)]
pub struct PriorityKey {
    /// Strict tier; a higher tier always dispatches before a lower one.
    pub strict_priority: u32,
    /// FCFS or WSPT score; larger dispatches first within a tier.
    pub score: f64,
    /// Enqueue sequence number (unique per queue); smaller dispatches first on equal score.
    pub seq: u64,
}

impl PriorityKey {
    /// Key of a request queued under `policy`.
    ///
    /// `priority_jump` (negative or NaN counts as 0) moves an FCFS request that many seconds
    /// earlier and multiplies the WSPT weight `1 + jump`. `arrival_offset_secs` is the time
    /// since the scheduler started when the request was queued (negative or NaN counts as 0).
    /// FCFS score = `jump - offset`; WSPT score = `(1 + jump) / cost_tokens`.
    pub fn new(
        policy: QueuePolicy,
        strict_priority: u32,
        priority_jump: f64,
        arrival_offset_secs: f64,
        cost_tokens: u64,
        seq: u64,
    ) -> Self {
        // f64::max returns the non-NaN operand, so NaN inputs become 0 here.
        let jump = priority_jump.max(0.0);
        let score = match policy {
            QueuePolicy::Fcfs => jump - arrival_offset_secs.max(0.0),
            QueuePolicy::Wspt => (1.0 + jump) / cost_tokens.max(1) as f64,
        };
        PriorityKey {
            strict_priority,
            score,
            seq,
        }
    }
}

impl Ord for PriorityKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.strict_priority
            .cmp(&other.strict_priority)
            .then_with(|| self.score.total_cmp(&other.score))
            // Earlier enqueue wins, so the smaller seq is the greater key.
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for PriorityKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PriorityKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PriorityKey {}

#[cfg(test)]
mod tests {
    use super::*;

    fn fcfs(strict: u32, jump: f64, offset_secs: f64, seq: u64) -> PriorityKey {
        PriorityKey::new(QueuePolicy::Fcfs, strict, jump, offset_secs, 1, seq)
    }

    fn wspt(strict: u32, jump: f64, cost: u64, seq: u64) -> PriorityKey {
        PriorityKey::new(QueuePolicy::Wspt, strict, jump, 0.0, cost, seq)
    }

    #[test]
    fn snapshot_clamps_cached_tokens_and_costs_at_least_one() {
        let partly = QueueSnapshot::new(1000, 300);
        assert_eq!((partly.cached_tokens, partly.uncached_tokens), (300, 700));
        assert_eq!(partly.cost_tokens, 700);
        let over = QueueSnapshot::new(100, 500);
        assert_eq!((over.cached_tokens, over.uncached_tokens), (100, 0));
        assert_eq!(
            over.cost_tokens, 1,
            "a fully cached request still costs one token"
        );
        assert_eq!(QueueSnapshot::new(0, 0).cost_tokens, 1);
    }

    #[test]
    fn fcfs_earlier_arrival_dispatches_first() {
        assert!(fcfs(0, 0.0, 1.0, 5) > fcfs(0, 0.0, 2.0, 1));
    }

    #[test]
    fn fcfs_priority_jump_counts_as_seconds_earlier() {
        // Arrived 5 s later but jumps 10 s: score 10 - 5 = 5 beats 0 - 0 = 0.
        assert!(fcfs(0, 10.0, 5.0, 2) > fcfs(0, 0.0, 0.0, 1));
        // A jump smaller than the lateness does not overtake.
        assert!(fcfs(0, 1.0, 5.0, 2) < fcfs(0, 0.0, 0.0, 1));
    }

    #[test]
    fn negative_or_nan_jump_and_offset_count_as_zero() {
        assert_eq!(fcfs(0, -3.0, 0.0, 1).score, 0.0);
        assert_eq!(fcfs(0, f64::NAN, 0.0, 1).score, 0.0);
        assert_eq!(fcfs(0, 0.0, -4.0, 1).score, 0.0);
        assert_eq!(wspt(0, f64::NAN, 4, 1).score, 0.25);
        assert_eq!(wspt(0, -1.0, 4, 1).score, 0.25);
    }

    #[test]
    fn wspt_prefers_cheaper_then_heavier_weight() {
        assert!(wspt(0, 0.0, 100, 9) > wspt(0, 0.0, 200, 1));
        // weight 1 + 1 over cost 200 equals 1 / 100: tie broken by seq.
        assert!(wspt(0, 1.0, 200, 1) > wspt(0, 0.0, 100, 2));
        assert!(wspt(0, 3.0, 200, 5) > wspt(0, 0.0, 100, 1));
    }

    #[test]
    fn strict_tier_beats_any_score() {
        assert!(fcfs(1, 0.0, 1.0e9, 100) > fcfs(0, 1.0e9, 0.0, 1));
        assert!(wspt(2, 0.0, 1_000_000, 100) > wspt(1, 100.0, 1, 1));
    }

    #[test]
    fn equal_score_breaks_on_lower_seq() {
        assert!(fcfs(0, 0.0, 1.0, 3) > fcfs(0, 0.0, 1.0, 4));
        assert_eq!(fcfs(0, 0.0, 1.0, 3), fcfs(0, 0.0, 1.0, 3));
    }
}
