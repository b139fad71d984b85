//! Per-class admission policy hook: Bypass / Ready / Defer on arrival and status updates.
