//! Benchmark of one DRR arbitration call (filled in with the queue).
fn main() {}
