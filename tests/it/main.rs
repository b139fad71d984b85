//! The integration tests, one binary grouped by intent.

mod cli;
mod fidelity;
mod safety_hang;
mod scenarios;
mod sweep;
mod tidy;
