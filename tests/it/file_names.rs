//! File names made of user text: two classes whose names differ only in `.` and `_` get a
//! plot each (run and replay), and a sweep's axis through a model name with `/` draws its
//! plots inside the output directory.

use super::support::run_in_dir;
use std::path::Path;

/// Classes `a.b` and `a_b`, one policy family each (a policy's keys, for a scenario's
/// `router:` or a `--policy` file).
const POLICY: &str = "\
default_policy_family: a_b
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: a.b, policy_family: a.b, cache_bucket: all, queue_policy: fcfs, quantum: 512}
  - {name: a_b, policy_family: a_b, cache_bucket: all, queue_policy: fcfs, quantum: 512}
";

/// The phase plots `out` holds, by name.
fn phase_plots(out: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("latency_phases_"))
        .collect();
    names.sort();
    names
}

const BOTH_PHASE_PLOTS: [&str; 4] = [
    "latency_phases_a.b.png",
    "latency_phases_a.b.svg",
    "latency_phases_a_b.png",
    "latency_phases_a_b.svg",
];

#[test]
fn a_disaggregated_run_plots_classes_a_dot_b_and_a_underscore_b_apart() {
    let dir = tempfile::tempdir().unwrap();
    let router: String = POLICY.lines().map(|l| format!("  {l}\n")).collect();
    let scenario = format!(
        "name: dotted\nrouter:\n{router}workers:\n  prefill: {{count: 1}}\n  decode: {{count: 1}}\n\
         workload:\n  rate_per_s: 20\n  duration_s: 1\n  groups:\n\
         \x20   - {{name: dotted, class: a.b, share: 0.5, input_tokens: 64, output_tokens: 4}}\n\
         \x20   - {{name: plain, class: a_b, share: 0.5, input_tokens: 64, output_tokens: 4}}\n"
    );
    std::fs::write(dir.path().join("s.yaml"), scenario).unwrap();
    let (code, _, stderr) = run_in_dir(dir.path(), &["run", "s.yaml", "--out", "out", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(phase_plots(&dir.path().join("out")), BOTH_PHASE_PLOTS);
}

#[test]
fn a_disaggregated_replay_plots_classes_a_dot_b_and_a_underscore_b_apart() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.yaml"), POLICY).unwrap();
    let trace = "\
{\"timestamp\": 0, \"input_length\": 64, \"output_length\": 2, \"hash_ids\": [1], \"policy_class\": \"a.b\"}
{\"timestamp\": 5, \"input_length\": 64, \"output_length\": 2, \"hash_ids\": [2], \"policy_class\": \"a_b\"}
";
    std::fs::write(dir.path().join("trace.jsonl"), trace).unwrap();
    let args = [
        "replay",
        "--trace",
        "trace.jsonl",
        "--policy",
        "policy.yaml",
        "--prefill-workers",
        "1",
        "--decode-workers",
        "1",
        "--plots",
        "--out",
        "out",
        "--quiet",
    ];
    let (code, _, stderr) = run_in_dir(dir.path(), &args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(phase_plots(&dir.path().join("out")), BOTH_PHASE_PLOTS);
}

#[test]
fn a_sweep_over_a_quoted_model_name_with_a_slash_writes_its_plots_inside_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let classes: String = POLICY.lines().map(|l| format!("      {l}\n")).collect();
    let scenario = format!(
        "name: model-sweep\nmodel: a/b\nrouter:\n  models:\n    \"a/b\":\n{classes}\
         workload:\n  groups:\n    - {{name: g, count: 4, input_tokens: 8, output_tokens: 2}}\n"
    );
    std::fs::write(dir.path().join("s.yaml"), scenario).unwrap();
    let set = "router.models.\"a/b\".default_policy_family=a.b,a_b";
    let args = ["sweep", "s.yaml", "--set", set, "--out", "out", "--quiet"];
    let (code, _, stderr) = run_in_dir(dir.path(), &args);
    assert_eq!(code, 0, "{stderr}");
    let chart = "share_first_n_vs_~22a~2Fb~22.default_policy_family.svg";
    assert!(dir.path().join("out").join(chart).exists(), "{chart}");
}
