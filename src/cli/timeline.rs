//! The `--timeline` flags of `run`, `replay` and `check`, and where `check` writes its
//! timelines (it has no output directory of its own).

use super::{CliError, input};
use crate::pipeline::Judgement;
use crate::report::{self, output, output::OutputKind};
use crate::scenario::Scenario;
use crate::sim::SimResult;
use std::path::{Path, PathBuf};

/// `--timeline` and its bound.
#[derive(clap::Args, Debug)]
pub(super) struct TimelineArgs {
    /// Also write timeline.json: the run as a Chrome trace-event file that ui.perfetto.dev
    /// and chrome://tracing open (passes per worker rank, requests per class, the router's
    /// counters, faults; docs/timeline.md). `check` writes each scenario's first replication
    /// (its own seed) into results/<name>-check/, or --out.
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
    ) -> Option<(String, report::FileBody<'a>)> {
        let max_requests = self
            .timeline_max_requests
            .unwrap_or(report::timeline::DEFAULT_MAX_REQUESTS);
        report::timeline::timeline_file(result, meta, max_requests)
    }
}

/// `check`'s timeline flags: the timeline's, and where it goes.
#[derive(clap::Args, Debug)]
pub(super) struct CheckTimelineArgs {
    #[command(flatten)]
    pub timeline: TimelineArgs,
    /// Where --timeline writes (one scenario only; default: results/<scenario name>-check/).
    /// It must be new, empty, or a previous `check --timeline` output.
    #[arg(long, requires = "timeline")]
    pub out: Option<PathBuf>,
    /// Also replace a previous output of another routersim command in the timeline's
    /// directory (only the files routersim wrote there).
    #[arg(long, requires = "timeline")]
    pub force: bool,
}

impl CheckTimelineArgs {
    /// Err (exit 2) for an `--out` given with several scenarios.
    pub fn check_scenarios(&self, scenarios: usize) -> Result<(), CliError> {
        match self.out.is_some() && scenarios != 1 {
            true => Err(CliError::Input(
                "--out takes one scenario; without it each scenario's timeline goes to results/<name>-check/".into(),
            )),
            false => Ok(()),
        }
    }

    /// Claims the directory `scenario`'s timeline goes into (`None` without `--timeline`),
    /// before its runs.
    pub fn claim(&self, scenario: &Scenario) -> Result<Option<output::OutputTarget>, CliError> {
        if !self.timeline.timeline {
            return Ok(None);
        }
        let default = || Path::new("results").join(format!("{}-check", scenario.name()));
        let dir = self.out.clone().unwrap_or_else(default);
        let target = output::claim(&dir, OutputKind::Check, &scenario.input_files(), self.force);
        Ok(Some(target.map_err(input)?))
    }

    /// Writes the timeline of `result`, the first replication of `judgement` (run with the
    /// overrides `set`), into `target` (claimed by [`Self::claim`]); nothing without either.
    pub fn write(
        &self,
        set: &[String],
        judgement: &Judgement,
        result: Option<SimResult>,
        target: Option<output::OutputTarget>,
    ) -> Result<(), CliError> {
        let (Some(result), Some(target)) = (result, target) else {
            return Ok(());
        };
        let scenario = &judgement.scenario;
        let meta = serde_json::json!({
            "command": "check",
            "scenario": scenario.name(),
            "scenario_hash": scenario.source_hash(),
            "overrides": set,
            "seed": scenario.seed(),
            "version": env!("CARGO_PKG_VERSION"),
        });
        let files: Vec<_> = self.timeline.file(&result, &meta).into_iter().collect();
        target.write_bodies(&files).map_err(input)
    }
}

/// Each seed's verdicts, in order, and the one result that kept a timeline, if any.
pub(super) fn split_timeline<V>(
    judged: Vec<(V, Option<SimResult>)>,
) -> (Vec<V>, Option<SimResult>) {
    let mut kept = None;
    let verdicts = judged
        .into_iter()
        .map(|(verdicts, result)| {
            kept = kept.take().or(result);
            verdicts
        })
        .collect();
    (verdicts, kept)
}
