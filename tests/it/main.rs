//! The integration tests, one binary grouped by intent.

mod check_seeds;
mod cli;
mod fidelity;
mod plan;
mod rate;
mod safety_bounds;
mod safety_hang;
mod safety_output;
mod scenarios;
mod stability;
mod sweep;
mod tidy;
mod timing;
