//! Judging: the expectation vocabulary scenarios are written in, the queries over a run's
//! metrics that answer its figures, and the verdicts. Uses only `measure`.

pub mod evaluate;
pub mod expect;
pub mod queries;
