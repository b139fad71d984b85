//! The scheduler actor as a sans-IO state machine: handle_* inputs, poll_* decisions.
