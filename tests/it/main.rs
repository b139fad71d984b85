//! The integration tests, one binary grouped by intent.

mod check_seeds;
mod cli;
mod disaggregated;
mod faults;
mod fidelity;
mod file_names;
mod input_messages;
mod plan;
mod pools;
mod rate;
mod replay_modes;
mod report_page;
mod safety_bounds;
mod safety_concurrent;
mod safety_hang;
mod safety_output;
mod scenarios;
mod sessions;
mod shape;
mod stability;
mod support;
mod sweep;
mod terminal_text;
mod tidy;
mod timeline;
mod timing;
