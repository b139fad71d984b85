//! The integration tests, one binary grouped by intent.

mod tidy;
