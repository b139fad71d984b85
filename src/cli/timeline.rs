//! The `--timeline` flags of `run`, `replay` and `check`.

use crate::report;
use crate::sim::SimResult;

/// `--timeline` and its bound.
#[derive(clap::Args, Debug)]
pub(super) struct TimelineArgs {
    /// Also write timeline.json: the run as a Chrome trace-event file that ui.perfetto.dev
    /// and chrome://tracing open (passes per worker rank, requests per class, the router's
    /// counters, faults; docs/timeline.md). `check` writes the first seed's, in its output
    /// directory (results/<name>-check/, or --out).
    #[arg(long)]
    pub timeline: bool,
    /// The requests whose slices timeline.json keeps: the first N by row (default 20000);
    /// every pass and counter is kept whatever N is.
    #[arg(long, value_name = "N", requires = "timeline")]
    pub timeline_max_requests: Option<u64>,
}

impl TimelineArgs {
    /// `timeline.json` of a run that kept a timeline (`None` otherwise).
    pub fn file<'a>(
        &self,
        result: &'a SimResult,
        meta: &serde_json::Value,
    ) -> Option<(String, report::output::FileBody<'a>)> {
        let max_requests = self
            .timeline_max_requests
            .unwrap_or(report::render::timeline::DEFAULT_MAX_REQUESTS);
        report::output::run_files::timeline_file(result, meta, max_requests)
    }
}
