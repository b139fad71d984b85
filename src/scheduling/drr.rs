//! Deficit round robin across policy classes (PolicyQueue) with per-worker queue limits.
