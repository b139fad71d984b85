//! Reports, in four rooms, each using only the rooms listed after it: `output` (writing a
//! run's files), `render` (pure exporters from figures and verdicts to bytes), `verdict`
//! (expectations: their vocabulary, the queries that answer them, and judging) and
//! `measure` (figures computed from a run's records).
//!
//! A run's report, in order: [`measure::metrics::RunMetrics::compute`] once, then
//! [`output::run_files::run_files`] (every result file) and [`render::table::class_table`]
//! (the terminal); for `check`, [`verdict::evaluate::evaluate`],
//! [`verdict::evaluate::format_outcome`] and [`render::junit::junit_xml`]; last,
//! [`output::run_files::with_report`] adds `report.html` (a page of all of them,
//! [`render::run_page`]). Only `output` touches the file system.

pub mod measure;
pub mod output;
pub mod render;
#[cfg(test)]
pub(crate) mod test_support;
pub mod verdict;
