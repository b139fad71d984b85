//! Request sources: mooncake traces and synthetic workloads.
