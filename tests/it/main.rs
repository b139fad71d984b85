//! The integration tests, one binary grouped by intent.

mod cli;
mod fidelity;
mod rate;
mod safety_bounds;
mod safety_hang;
mod safety_output;
mod scenarios;
mod sweep;
mod tidy;
