//! Identifiers and messages shared by every part of the scheduling core (and its callers).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A worker (one engine process) as the router discovers it.
pub type WorkerId = u64;
/// A data-parallel rank inside a worker; each rank is its own scheduling target.
pub type DpRank = u32;
/// A sequence hash: commits to a full KV block and every block before it.
pub type SeqHash = u64;
/// A prompt token id.
pub type Token = u32;

/// One scheduling target: a worker's data-parallel rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkerWithDpRank {
    pub worker_id: WorkerId,
    pub dp_rank: DpRank,
}

impl WorkerWithDpRank {
    pub const fn new(worker_id: WorkerId, dp_rank: DpRank) -> Self {
        WorkerWithDpRank { worker_id, dp_rank }
    }
}

impl fmt::Display for WorkerWithDpRank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker {} rank {}", self.worker_id, self.dp_rank)
    }
}

/// The caller's identity for a request. Numeric so that hot-path maps stay cheap; a router
/// with text ids keeps its own text-to-number map outside the core.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Order of requests inside one policy class.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueuePolicy {
    /// First come first served; `priority` moves a request that many seconds earlier.
    #[default]
    Fcfs,
    /// Weighted shortest processing time: `(1 + priority) / cost`, largest first.
    Wspt,
}

impl fmt::Display for QueuePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QueuePolicy::Fcfs => "fcfs",
            QueuePolicy::Wspt => "wspt",
        })
    }
}

/// A change in a worker's KV cache, as a worker publishes it to the router's indexer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEventData {
    /// New full blocks, in prompt order, each the child of the one before (the first one's
    /// parent is `parent`).
    Stored {
        parent: Option<SeqHash>,
        blocks: Vec<SeqHash>,
    },
    /// Blocks evicted or destroyed.
    Removed { blocks: Vec<SeqHash> },
    /// Everything on the rank is gone.
    Cleared,
}

/// A KV event tagged with the rank it happened on and its per-rank sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEvent {
    pub worker: WorkerWithDpRank,
    pub event_id: u64,
    pub data: KvEventData,
}
