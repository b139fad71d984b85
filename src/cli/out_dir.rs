//! Where a command writes when `--out` is not given. One rule for every command:
//! `results/<scenario name>/` for `run`, `results/<name>-<command>/` for the others, and a
//! plan's directory names its search too, so two different plans of one scenario never
//! replace each other.

use std::path::PathBuf;

/// The folder every default output directory is made in, relative to where routersim runs.
const RESULTS_DIR: &str = "results";

/// `results/<name>/`: where `run` writes.
pub(super) fn run_dir(name: &str) -> PathBuf {
    PathBuf::from(RESULTS_DIR).join(component(name))
}

/// `results/<name>-<command>/`: where `check`, `sweep`, `merge` (as `sweep`) and `replay`
/// (named by its trace's file stem) write.
pub(super) fn command_dir(name: &str, command: &str) -> PathBuf {
    PathBuf::from(RESULTS_DIR).join(component(&format!("{name}-{command}")))
}

/// `results/<name>-plan-<minimize|maximize>-<parameter>[-total-<T>]/`: a plan's directory
/// names its goal, its parameter and a fixed total's sum, so that a `--maximize` does not
/// replace an earlier `--minimize` of the same scenario.
pub(super) fn plan_dir(name: &str, goal: &str, parameter: &str, total: Option<&str>) -> PathBuf {
    let mut dir = format!("{name}-plan-{goal}-{parameter}");
    if let Some(total) = total {
        let sum = total.rsplit_once('=').map_or(total, |(_, sum)| sum).trim();
        dir.push_str(&format!("-total-{sum}"));
    }
    PathBuf::from(RESULTS_DIR).join(component(&dir))
}

/// `text` as one path component: a character that a file name cannot hold, or that would
/// make it name another directory (`/`, `\`, a leading `.`), becomes `_`. Scenario names are
/// one component already; a `--set` path or a trace's file stem may not be.
fn component(text: &str) -> String {
    let kept: String = text
        .chars()
        .map(|c| match c.is_alphanumeric() || "-_.+=,".contains(c) {
            true => c,
            false => '_',
        })
        .collect();
    match kept.strip_prefix('.') {
        Some(rest) => format!("_{rest}"),
        None if kept.is_empty() => "_".to_string(),
        None => kept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_directory_is_under_results_and_named_by_scenario_and_command() {
        assert_eq!(run_dir("chat"), PathBuf::from("results/chat"));
        assert_eq!(
            command_dir("chat", "check"),
            PathBuf::from("results/chat-check")
        );
        assert_eq!(
            command_dir("chat", "sweep"),
            PathBuf::from("results/chat-sweep")
        );
    }

    #[test]
    fn a_maximize_and_a_minimize_plan_of_one_scenario_land_apart() {
        let min = plan_dir("chat", "minimize", "workers.count", None);
        let max = plan_dir("chat", "maximize", "workload.rate_per_s", None);
        assert_eq!(
            min,
            PathBuf::from("results/chat-plan-minimize-workers.count")
        );
        assert_ne!(min, max);
        let split = plan_dir(
            "chat",
            "maximize",
            "workload.rate_per_s",
            Some("workers.prefill.count+workers.decode.count=8"),
        );
        assert_eq!(
            split,
            PathBuf::from("results/chat-plan-maximize-workload.rate_per_s-total-8")
        );
    }

    #[test]
    fn a_name_that_would_leave_the_results_folder_stays_one_component() {
        assert_eq!(
            command_dir("../etc", "replay"),
            PathBuf::from("results/_._etc-replay")
        );
        assert_eq!(run_dir(""), PathBuf::from("results/_"));
        assert_eq!(
            plan_dir("s", "minimize", "a/b", None),
            PathBuf::from("results/s-plan-minimize-a_b")
        );
    }
}
