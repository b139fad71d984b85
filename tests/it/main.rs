//! The integration tests, one binary grouped by intent.

mod fidelity;
mod tidy;
