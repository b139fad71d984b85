//! Benchmark of one DRR arbitration step: `pop_next` plus re-enqueueing the popped entry.
//!
//! Parameters: C = 2, 8, 64 classes; 0 or 10,000 exact-worker lanes (half of them on full
//! workers); head cost / quantum = 1, 1e3, 1e6. Every entry is re-enqueued after its pop so
//! the queue stays in a steady state. A second group lets only one class dispatch, so every
//! call at ratio > 1 needs a full ring scan plus bulk credit. The cost/quantum ratio must not
//! change the time per call: bulk credit replaces per-round looping.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use routersim::scheduling::class_queue::{Placement, QueueEntry};
use routersim::scheduling::drr::{ClassQueueConfig, PolicyQueue};
use routersim::scheduling::request::QueueSnapshot;
use routersim::scheduling::types::{QueuePolicy, WorkerWithDpRank};
use std::hint::black_box;
use std::time::Duration;

const QUANTUM_TOKENS: u64 = 1000;
const SHARED_ENTRIES_PER_CLASS: u64 = 16;

/// Workers with an odd id are full: their lanes block.
fn worker_has_room(entry: &QueueEntry<u64>) -> bool {
    match entry.placement {
        Placement::Exact(worker) => worker.worker_id % 2 == 0,
        Placement::Any => true,
    }
}

fn requeue(queue: &mut PolicyQueue<u64>, entry: QueueEntry<u64>) {
    let QueueEntry {
        payload,
        class_index,
        snapshot,
        placement,
        ..
    } = entry;
    let queued = queue.enqueue(class_index, payload, snapshot, placement, 0, 0.0, 0.0, 1);
    debug_assert!(queued.is_ok());
}

/// A backlogged queue: every class holds shared entries, lanes are spread over the classes.
fn steady_queue(classes: usize, lanes: u64, cost_tokens: u64) -> PolicyQueue<u64> {
    let configs = (0..classes)
        .map(|i| ClassQueueConfig {
            name: format!("class{i}"),
            quantum_tokens: QUANTUM_TOKENS,
            queue_policy: QueuePolicy::Fcfs,
            request_limit_per_worker: None,
            raw_isl_token_limit_per_worker: None,
            cached_token_limit_per_worker: None,
        })
        .collect();
    let mut queue = PolicyQueue::new(configs);
    let snapshot = QueueSnapshot::new(cost_tokens, 0);
    let mut id = 0u64;
    for class in 0..classes {
        for _ in 0..SHARED_ENTRIES_PER_CLASS {
            queue
                .enqueue(class, id, snapshot, Placement::Any, 0, 0.0, 0.0, 1)
                .unwrap();
            id += 1;
        }
    }
    for worker_id in 0..lanes {
        let class = (worker_id % classes as u64) as usize;
        let placement = Placement::Exact(WorkerWithDpRank::new(worker_id, 0));
        queue
            .enqueue(class, id, snapshot, placement, 0, 0.0, 0.0, 1)
            .unwrap();
        id += 1;
    }
    queue
}

fn bench_pop_next(c: &mut Criterion) {
    let mut group = c.benchmark_group("pop_next");
    for classes in [2usize, 8, 64] {
        for lanes in [0u64, 10_000] {
            for ratio in [1u64, 1_000, 1_000_000] {
                let cost_tokens = QUANTUM_TOKENS * ratio;
                let mut queue = steady_queue(classes, lanes, cost_tokens);
                let name = format!("C{classes}/lanes{lanes}");
                let id = BenchmarkId::new(name, format!("ratio{ratio}"));
                group.bench_function(id, |b| {
                    b.iter(|| {
                        let popped = queue.pop_next(&mut worker_has_room);
                        let entry = black_box(popped).expect("steady backlog");
                        requeue(&mut queue, entry);
                    })
                });
            }
        }
    }
    group.finish();
}

/// Worst case for bulk credit: only class 0 can dispatch, so at ratio > 1 every call scans
/// the whole ring, then fast-forwards class 0 by bulk credit.
fn bench_pop_next_one_ready_class(c: &mut Criterion) {
    let mut group = c.benchmark_group("pop_next_one_ready_class");
    let mut only_class_0 = |entry: &QueueEntry<u64>| entry.class_index == 0;
    for classes in [2usize, 8, 64] {
        for ratio in [1u64, 1_000, 1_000_000] {
            let mut queue = steady_queue(classes, 0, QUANTUM_TOKENS * ratio);
            let id = BenchmarkId::new(format!("C{classes}"), format!("ratio{ratio}"));
            group.bench_function(id, |b| {
                b.iter(|| {
                    let popped = queue.pop_next(&mut only_class_0);
                    let entry = black_box(popped).expect("class 0 stays backlogged");
                    requeue(&mut queue, entry);
                })
            });
        }
    }
    group.finish();
}

fn short_runs() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10)
}

criterion_group! {
    name = benches;
    config = short_runs();
    targets = bench_pop_next, bench_pop_next_one_ready_class
}
criterion_main!(benches);
