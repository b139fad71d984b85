//! Scenario loading: bundled files, every kind of bad input, `--set`, and an end-to-end run.

use super::*;
use crate::scheduling::types::WorkerWithDpRank;
use crate::sim::RouterMode;
use crate::workload::RequestSpec;
use crate::workload::synth::SynthRequest;
use crate::workload::trace::{self, TraceReader};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// Test views of a scenario's requests (runs get theirs from `pipeline::RunSpec`).
impl Scenario {
    /// The run's requests, sorted by arrival (ties in row order). Synthetic workloads draw
    /// from `seed`; traces ignore it. Errors if a trace cannot be read.
    /// With `delays.arrival_jitter_ns` each arrival is delayed by a seeded draw.
    /// A test view: runs get their requests from `pipeline::RunSpec`, the one pipeline.
    pub fn requests(&self, seed: u64) -> Result<Vec<RequestSpec>, ScenarioError> {
        let requests: Vec<crate::workload::Arrival> = match &self.workload {
            Workload::Synthetic(_) => self
                .synth_requests(seed)?
                .into_iter()
                .map(|r| r.spec.into())
                .collect(),
            Workload::Trace {
                path,
                block_size,
                arrival_speedup_ratio,
                ..
            } => read_trace(path, *block_size, *arrival_speedup_ratio)?
                .into_iter()
                .map(Into::into)
                .collect(),
        };
        let jittered = crate::workload::jitter_arrivals(requests, seed, self.arrival_jitter_ns);
        Ok(jittered.into_iter().map(|a| a.spec).collect())
    }

    /// The synthetic requests with their pinned workers (empty for a trace workload).
    pub fn synth_requests(&self, seed: u64) -> Result<Vec<SynthRequest>, ScenarioError> {
        match &self.workload {
            Workload::Synthetic(synth) => synth
                .generate(seed)
                .map_err(|e| synth_error(&self.file, &e)),
            Workload::Trace { .. } => Ok(Vec::new()),
        }
    }
}

/// The configuration of `scenario`'s run with seed 0.
fn run_config(scenario: &Scenario) -> SimConfig {
    scenario.config().clone().with_seed(0)
}

/// All rows of a (previously scanned) trace, sorted by arrival.
fn read_trace(
    path: &Path,
    block_size: u64,
    speedup_ratio: f64,
) -> Result<Vec<RequestSpec>, ScenarioError> {
    let name = path.display().to_string();
    let open = || {
        File::open(path).map(BufReader::new).map_err(|e| {
            ScenarioError::in_file(name.clone(), format!("cannot read the trace: {e}"))
        })
    };
    let summary = trace::scan(open()?, &name, block_size)?;
    let mut requests: Vec<RequestSpec> = TraceReader::new(open()?, &name, block_size)
        .with_origin_ms(summary.origin_ms)
        .with_speedup_ratio(speedup_ratio)
        .collect::<Result<_, _>>()?;
    requests.sort_by_key(|r| (r.arrival, r.row));
    Ok(requests)
}

const WEIGHTED: &str = include_str!("../../scenarios/premium-vs-regular-weighted.yaml");

fn bundled(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
}

/// Loads `text` as if it were `dir/s.yaml`, returning the error.
fn error_of(text: &str) -> ScenarioError {
    Scenario::from_text(Path::new("s.yaml"), text, &[]).unwrap_err()
}

fn set(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(p, v)| (p.to_string(), v.to_string()))
        .collect()
}

#[test]
fn every_bundled_scenario_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("# "),
            "{}: needs a comment header",
            path.display()
        );
        let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file_kind(&text), FileKind::Scenario);
        assert!(!scenario.describe().is_empty());
        let requests = scenario.requests(scenario.seed());
        assert!(requests.is_ok_and(|r| !r.is_empty()), "{}", path.display());
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/scenarios")
        .join(name)
}

fn fixture_error(name: &str) -> ScenarioError {
    Scenario::load(&fixture(name)).unwrap_err()
}

/// The file, line and field of an error, as a tuple to compare in one go.
fn where_(e: &ScenarioError) -> (String, Option<usize>, String) {
    (e.file.clone(), e.line, e.field_path.clone())
}

const MINIMAL: &str = "\
name: minimal
workers:
  count: 1
  engine: {max_num_seqs: 4}
workload:
  groups:
    - {name: a, count: 3, input_tokens: 64, output_tokens: 1}
";

#[test]
fn empty_file_is_an_error() {
    let e = fixture_error("empty.yaml");
    assert_eq!(e.file, fixture("empty.yaml").display().to_string());
    assert!(e.message.contains("empty"), "{e}");
    assert!(error_of("# only a comment\n").message.contains("empty"));
}

#[test]
fn text_that_is_not_a_scenario_is_an_error() {
    let e = error_of("just some words\n");
    assert_eq!(where_(&e), ("s.yaml".into(), Some(1), "".into()));
    assert!(e.message.contains("a scenario is a YAML mapping"), "{e}");
    assert!(e.to_string().starts_with("s.yaml:1: "), "{e}");
    let e = error_of("- a\n- b\n");
    assert_eq!(e.line, Some(1), "{e}");
}

#[test]
fn syntax_errors_carry_file_and_line() {
    let e = fixture_error("syntax-error.yaml");
    assert_eq!(e.file, fixture("syntax-error.yaml").display().to_string());
    assert!(e.line.is_some_and(|l| l >= 3), "{e}");
}

#[test]
fn unknown_fields_are_errors_at_every_depth() {
    let e = fixture_error("unknown-engine-field.yaml");
    assert_eq!(e.line, Some(6), "{e}");
    assert_eq!(e.field_path, "workers.engine.max_num_seq");
    assert!(e.message.contains("unknown field `max_num_seq`"), "{e}");
    for (text, line, path) in [
        ("seed: 1\nnmae: x\n", 2, "nmae"),
        (&MINIMAL.replace("count: 1", "cuont: 1"), 3, "workers.cuont"),
        (
            &MINIMAL.replace("count: 3", "count: 3, colour: red"),
            7,
            "workload.groups.a.colour",
        ),
        (
            &format!("{MINIMAL}router:\n  router_temprature: 0.5\n"),
            9,
            "router.router_temprature",
        ),
        (
            &format!("{MINIMAL}delays: {{router_to_worker: 1}}\n"),
            8,
            "delays.router_to_worker",
        ),
    ] {
        let e = error_of(text);
        assert_eq!((e.line, e.field_path.as_str()), (Some(line), path), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
    }
    let policy = format!(
        "{MINIMAL}router:\n  default_policy_family: a\n  uncached_isl_buckets: [{{min_tokens: 0, bucket: all}}]\n  policy_classes:\n    - {{name: a, policy_family: a, cache_bucket: all, quantum: 1, qunatum: 2}}\n"
    );
    let e = error_of(&policy);
    assert_eq!(e.line, Some(12), "{e}");
    assert_eq!(e.field_path, "router.policy_classes.a.qunatum");
}

#[test]
fn wrong_types_are_errors() {
    let e = error_of(&MINIMAL.replace("count: 1", "count: many"));
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(3), "workers.count"),
        "{e}"
    );
    let e = error_of(&MINIMAL.replace("max_num_seqs: 4", "max_num_seqs: [4]"));
    assert_eq!(e.line, Some(4), "{e}");
    assert_eq!(e.field_path, "workers.engine.max_num_seqs");
}

#[test]
fn zero_or_negative_where_positive_is_needed() {
    let e = fixture_error("zero-max-num-seqs.yaml");
    assert_eq!(e.line, Some(4), "{e}");
    assert_eq!(e.field_path, "workers.engine.max_num_seqs");
    assert!(e.message.contains("must be positive"), "{e}");
    let e = error_of(&MINIMAL.replace("count: 3", "count: -1"));
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(7), "workload.groups.a.count"),
        "{e}"
    );
    let e = error_of(&MINIMAL.replace("count: 3", "count: 0"));
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(7), "workload.groups.a.count"),
        "{e}"
    );
    assert!(e.message.contains("must be positive"), "{e}");
    let e = error_of(&MINIMAL.replace("count: 1", "count: 0"));
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(3), "workers.count"),
        "{e}"
    );
    let e = error_of(&MINIMAL.replace("input_tokens: 64", "input_tokens: -5"));
    assert_eq!(e.field_path, "workload.groups.a.input_tokens", "{e}");
    assert_eq!(e.line, Some(7));
}

#[test]
fn unknown_class_in_a_group_is_an_error() {
    let e = fixture_error("unknown-class.yaml");
    assert_eq!(e.line, Some(11), "{e}");
    assert_eq!(e.field_path, "workload.groups.b.class");
    assert!(e.message.contains("unknown class `premium`"), "{e}");
    assert!(e.message.contains("regular"), "{e}");
}

#[test]
fn unknown_class_in_an_expectation_is_an_error() {
    let text =
        format!("{MINIMAL}expect:\n  - {{prefix_count: {{class: gold, n: 1}}, at_least: 1}}\n");
    let e = error_of(&text);
    assert_eq!(e.line, Some(9), "{e}");
    assert_eq!(e.field_path, "expect.0.prefix_count.class");
    assert!(e.message.contains("unknown class `gold`"), "{e}");
    let text = format!(
        "{MINIMAL}expect:\n  - {{prefix_count: {{class: default, n: 1}}, within: [3, 1]}}\n"
    );
    assert!(error_of(&text).message.contains("lo <= hi"));
    let text = format!("{MINIMAL}expect:\n  - {{prefix_count: {{class: default, n: 1}}}}\n");
    assert!(error_of(&text).message.contains("needs exactly one bound"));
    let text = format!(
        "{MINIMAL}expect:\n  - {{prefix_count: {{class: default, n: 1}}, latency: {{class: default, metric: x}}, at_least: 1}}\n"
    );
    assert!(error_of(&text).message.contains("exactly one figure"));
}

/// Expectation errors are found once, at load, at the offending field's own line: each case
/// is one block-style entry (`name` on line 9, then `figure` on 10, then `bound` on 11).
#[test]
fn expectation_errors_name_file_line_and_field() {
    let cases = [
        (
            "prefix_share: {class: default, n: 4}",
            "at_least: 75",
            (11, "expect.e.at_least"),
            "a share is a fraction in [0, 1], got 75",
        ),
        (
            "prefix_share: {class: gold, n: 4}",
            "at_least: 0.5",
            (10, "expect.e.prefix_share.class"),
            "unknown class `gold`: the scenario's classes are default",
        ),
        (
            "growth: {class: default, when: default, from: 2, to: 2}",
            "at_least: 0",
            (10, "expect.e.growth.to"),
            "must be greater than from (2), got 2",
        ),
        (
            "count_at: {class: default, when: default, k: 0}",
            "at_least: 0",
            (10, "expect.e.count_at.k"),
            "must be at least 1",
        ),
        (
            "latency: {class: default, metric: ttft_p99}",
            "at_most: 1",
            (10, "expect.e.latency.metric"),
            "unknown metric `ttft_p99`",
        ),
        (
            "prefix_count: {class: default, n: 4}",
            "tolerance: 0.1",
            (11, "expect.e.tolerance"),
            "applies to token_share only, not prefix_count",
        ),
        (
            "prefix_count: {class: default, n: 4}",
            "minus: missing.yaml",
            (9, "expect.e"),
            "needs exactly one bound",
        ),
        (
            "prefix_count: {class: default, n: 4}",
            "within: [.inf, 1]",
            (11, "expect.e.within"),
            "needs finite lo <= hi, got [inf, 1]",
        ),
    ];
    for (figure, bound, (line, field), message) in cases {
        let text = format!("{MINIMAL}expect:\n  - name: e\n    {figure}\n    {bound}\n");
        let e = error_of(&text);
        assert_eq!(
            (e.file.as_str(), e.line, e.field_path.as_str()),
            ("s.yaml", Some(line), field),
            "{e}"
        );
        assert!(e.message.starts_with(message), "{e}");
    }
}

#[test]
fn a_missing_companion_is_an_error_at_minus() {
    let text = format!(
        "{MINIMAL}expect:\n  - name: e\n    prefix_count: {{class: default, n: 4}}\n    minus: missing.yaml\n    at_least: 0\n"
    );
    let e = error_of(&text);
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(11), "expect.e.minus"),
        "{e}"
    );
    assert!(e.message.contains("does not exist"), "{e}");
}

#[test]
fn empty_workload_is_an_error() {
    let e = error_of("name: x\nworkload: {}\n");
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(2), "workload"),
        "{e}"
    );
    assert!(e.message.contains("empty"), "{e}");
    let e = error_of("name: x\nworkload:\n  groups: []\n");
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(3), "workload.groups"),
        "{e}"
    );
}

#[test]
fn missing_file_is_an_error() {
    let path = fixture("does-not-exist.yaml");
    let e = Scenario::load(&path).unwrap_err();
    assert_eq!(where_(&e), (path.display().to_string(), None, "".into()));
    assert!(e.message.contains("cannot read"), "{e}");
    let e = error_of(&MINIMAL.replace(
        "  groups:\n    - {name: a, count: 3, input_tokens: 64, output_tokens: 1}\n",
        "  trace: nowhere.jsonl\n",
    ));
    assert_eq!(e.field_path, "workload.trace", "{e}");
}

#[test]
fn set_overrides_values_by_list_entry_name() {
    let path = bundled("premium-vs-regular-weighted.yaml");
    let overrides = set(&[
        ("router.policy_classes.regular.quantum", "64"),
        ("workers.count", "2"),
        ("workload.groups.premium.count", "100"),
        ("router.router_temperature", "0.5"),
    ]);
    let scenario = Scenario::load_with_overrides(&path, &overrides).unwrap();
    let config = scenario.config();
    assert_eq!(config.pools()[0].count, 2);
    assert_eq!(config.profile().classes()[1].quantum_tokens, 64);
    assert_eq!(config.router().router_temperature, 0.5);
    let requests = scenario.requests(0).unwrap();
    assert_eq!(requests.len(), 420);
    let plain = Scenario::load(&path).unwrap();
    assert_ne!(plain.source_hash(), scenario.source_hash());
    assert_eq!(
        plain.source_hash(),
        Scenario::load(&path).unwrap().source_hash()
    );
}

#[test]
fn bad_set_path_is_an_error_naming_the_path() {
    let path = bundled("premium-vs-regular-weighted.yaml");
    let e =
        Scenario::load_with_overrides(&path, &set(&[("router.policy_classes.gold.quantum", "1")]))
            .unwrap_err();
    assert_eq!(e.file, path.display().to_string());
    assert_eq!(e.field_path, "router.policy_classes.gold.quantum");
    assert!(e.line.is_some(), "{e}");
    let e = Scenario::load_with_overrides(&path, &set(&[("workers.engine.max_num_seq", "1")]))
        .unwrap_err();
    assert_eq!(e.field_path, "workers.engine.max_num_seq", "{e}");
    assert!(
        e.message
            .starts_with("--set workers.engine.max_num_seq=1: unknown field"),
        "{e}"
    );
}

#[test]
fn bad_set_value_is_an_error_naming_the_path() {
    let path = bundled("premium-vs-regular-weighted.yaml");
    let e = Scenario::load_with_overrides(
        &path,
        &set(&[("router.policy_classes.regular.quantum", "lots")]),
    )
    .unwrap_err();
    assert_eq!(e.file, path.display().to_string());
    assert_eq!(e.line, Some(29), "{e}");
    assert_eq!(e.field_path, "router.policy_classes.regular.quantum");
    assert!(
        e.message
            .starts_with("--set router.policy_classes.regular.quantum=lots: "),
        "{e}"
    );
    let e = Scenario::load_with_overrides(&path, &set(&[("workers.count", "0")])).unwrap_err();
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(33), "workers.count"),
        "{e}"
    );
    assert!(e.message.contains("must be positive"), "{e}");
}

#[test]
fn policy_validation_errors_name_the_class_by_name() {
    let e = Scenario::from_text(
        Path::new("s.yaml"),
        &WEIGHTED.replace("quantum: 128", "quantum: 0"),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(29), "router.policy_classes.regular.quantum"),
        "{e}"
    );
}

/// The weighted scenario with its policy in `dir/p.yaml` (`router: {policy: p.yaml}`).
fn with_external_policy(dir: &Path) -> PathBuf {
    let start = WEIGHTED.find("\nrouter:\n").unwrap() + 1;
    let end = WEIGHTED.find("\nworkers:\n").unwrap() + 1;
    let policy: String = WEIGHTED[start..end]
        .lines()
        .skip(1)
        .map(|line| format!("{}\n", line.strip_prefix("  ").unwrap_or(line)))
        .collect();
    std::fs::write(dir.join("p.yaml"), policy).unwrap();
    let scenario = format!(
        "{}router: {{policy: p.yaml}}\n{}",
        &WEIGHTED[..start],
        &WEIGHTED[end..]
    );
    std::fs::write(dir.join("s.yaml"), scenario).unwrap();
    // The companion of the weighted scenario's difference checks.
    let equal = bundled("premium-vs-regular-equal.yaml");
    std::fs::copy(equal, dir.join("premium-vs-regular-equal.yaml")).unwrap();
    dir.join("s.yaml")
}

#[test]
fn set_reaches_the_keys_of_a_policy_in_its_own_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = with_external_policy(tmp.path());
    let quantum = |overrides: &[(&str, &str)]| {
        let scenario = Scenario::load_with_overrides(&path, &set(overrides)).unwrap();
        scenario.config().profile().classes()[1].quantum_tokens
    };
    assert_eq!(quantum(&[]), 128);
    assert_eq!(
        quantum(&[("router.policy_classes.regular.quantum", "512")]),
        512
    );
    assert_eq!(quantum(&[("router.policy_classes[1].quantum", "256")]), 256);
}

#[test]
fn errors_of_a_set_in_a_policy_file_name_that_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let path = with_external_policy(tmp.path());
    let policy = tmp.path().join("p.yaml").display().to_string();
    let error =
        |pair: (&str, &str)| Scenario::load_with_overrides(&path, &set(&[pair])).unwrap_err();
    let e = error(("router.policy_classes.regular.quantum", "0"));
    assert_eq!(e.file, policy);
    assert_eq!(e.line, Some(16), "{e}");
    assert_eq!(e.field_path, "router.policy_classes.regular.quantum", "{e}");
    assert!(
        e.message
            .starts_with("--set router.policy_classes.regular.quantum=0: "),
        "{e}"
    );
    let e = error(("router.policy_classes.regular.queue_policy", "lifo"));
    assert_eq!(
        (e.file.as_str(), e.line),
        (policy.as_str(), Some(15)),
        "{e}"
    );
    assert_eq!(e.field_path, "router.policy_classes.regular.queue_policy");
    assert!(e.message.contains("unknown value `lifo`"), "{e}");
    let e = error(("router.policy_classes.gold.quantum", "1"));
    assert_eq!(e.field_path, "router.policy_classes.gold.quantum");
    assert!(e.message.contains("cannot add list entries"), "{e}");
}

#[test]
fn errors_inside_a_policy_file_name_that_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let path = with_external_policy(tmp.path());
    let policy = tmp.path().join("p.yaml");
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(
        &policy,
        text.replacen("queue_policy: fcfs", "queue_policy: lifo", 2),
    )
    .unwrap();
    let e = Scenario::load(&path).unwrap_err();
    assert_eq!(e.file, policy.display().to_string());
    assert_eq!(e.line, Some(8), "{e}");
    assert_eq!(e.field_path, "router.policy_classes.premium.queue_policy");
    assert!(
        e.message
            .contains("unknown value `lifo`, expected one of fcfs, wspt, lcfs"),
        "{e}"
    );
}

#[test]
fn set_reaches_fields_left_at_their_default() {
    let no_delays: String = WEIGHTED
        .lines()
        .filter(|line| !line.starts_with("delays:"))
        .map(|line| format!("{line}\n"))
        .collect();
    let no_workers = no_delays.replace("workers:\n  count: 1\n", "workers:\n");
    // Beside the bundled files, where the companion scenario is.
    let path = bundled("s.yaml");
    let load =
        |text: &str, pairs: &[(&str, &str)]| Scenario::from_text(&path, text, &set(pairs)).unwrap();
    let jittered = load(&no_delays, &[("delays.arrival_jitter_ns", "1000")]);
    let plain = load(&no_delays, &[]);
    let arrivals =
        |s: &Scenario| -> Vec<_> { s.requests(1).unwrap().iter().map(|r| r.arrival).collect() };
    assert_ne!(arrivals(&jittered), arrivals(&plain));
    assert_eq!(jittered.arrival_jitter_ns, 1000);
    let counted = load(
        &no_workers,
        &[("workers.count", "4"), ("limits.max_events", "9")],
    );
    assert_eq!(counted.config().pools()[0].count, 4);
    assert_eq!(counted.config().limits().max_events, 9);
    let e = Scenario::from_text(&path, &no_delays, &set(&[("delays.bogus_ms", "1")])).unwrap_err();
    assert_eq!(e.field_path, "delays.bogus_ms", "{e}");
    assert_eq!(
        e.message,
        "--set delays.bogus_ms=1: unknown field `bogus_ms`"
    );
    let e =
        Scenario::from_text(&path, &no_delays, &set(&[("expect.x.at_least", "1")])).unwrap_err();
    assert!(e.message.contains("cannot add list entries"), "{e}");
}

#[test]
fn unknown_values_and_duplicate_keys_name_the_field() {
    let e = error_of(&WEIGHTED.replace("order: alternate", "order: zigzag"));
    assert_eq!(e.field_path, "workload.burst.order", "{e}");
    assert!(
        e.message
            .starts_with("unknown value `zigzag`, expected one of sequential"),
        "{e}"
    );
    let e = error_of(&WEIGHTED.replace(
        "max_num_seqs: 4",
        "max_num_seqs: 4\n    preemption_mode: newest",
    ));
    assert_eq!(e.field_path, "workers.engine.preemption_mode", "{e}");
    assert_eq!(
        e.message,
        "unknown value `newest`, expected one of lifo, fifo"
    );
    let e = error_of(&WEIGHTED.replacen("queue_policy: fcfs", "queue_policy: lifo", 1));
    assert_eq!(
        e.field_path, "router.policy_classes.premium.queue_policy",
        "{e}"
    );
    let e = error_of(&WEIGHTED.replace("seed: 0\n", "seed: 0\nseed: 1\n"));
    assert_eq!(
        (e.field_path.as_str(), e.message.as_str()),
        ("seed", "duplicate key `seed`")
    );
    let e = error_of(&WEIGHTED.replace(
        "router:\n",
        "router:\n  router_temperature: 1\n  router_temperature: 2\n",
    ));
    assert_eq!(e.message, "duplicate key `router_temperature`", "{e}");
}

#[test]
fn file_kind_tells_scenarios_from_policies() {
    assert_eq!(file_kind(MINIMAL), FileKind::Scenario);
    let policy = include_str!("../../tests/fixtures/policy/premium-regular.yaml");
    assert_eq!(file_kind(policy), FileKind::Policy);
    assert_eq!(file_kind(""), FileKind::Policy);
}

#[test]
fn weighted_scenario_has_all_nine_checks_and_its_companion() {
    let weighted = Scenario::load(&bundled("premium-vs-regular-weighted.yaml")).unwrap();
    let equal = Scenario::load(&bundled("premium-vs-regular-equal.yaml")).unwrap();
    assert_eq!(
        weighted.expectations().len() + equal.expectations().len(),
        9
    );
    assert_eq!(
        weighted.companions(),
        vec![bundled("premium-vs-regular-equal.yaml")]
    );
    assert_eq!(weighted.class_names(), ["premium", "regular"]);
}

/// Class counts in completion order (ties by row), as Dynamo's test observes them.
fn completion_classes(result: &crate::sim::SimResult) -> Vec<String> {
    let mut done: Vec<_> = result
        .records
        .iter()
        .filter(|r| r.completion.is_some())
        .collect();
    done.sort_by_key(|r| (r.completion, r.row));
    done.iter()
        .map(|r| r.policy_class.as_deref().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn weighted_scenario_reproduces_dynamo_255_65_with_239_left() {
    let scenario = Scenario::load(&bundled("premium-vs-regular-weighted.yaml")).unwrap();
    let requests = scenario.requests(0).unwrap();
    let result =
        crate::sim::run(crate::sim::Options::new(run_config(&scenario)), requests).unwrap();
    let order = completion_classes(&result);
    assert_eq!(order.len(), 640);
    let premium_first = order[..320].iter().filter(|c| *c == "premium").count();
    assert_eq!((premium_first, 320 - premium_first), (255, 65));
    let premium_done = order
        .iter()
        .enumerate()
        .filter(|(_, c)| *c == "premium")
        .nth(319)
        .unwrap()
        .0;
    let regular_done = order[..=premium_done]
        .iter()
        .filter(|c| *c == "regular")
        .count();
    assert_eq!(320 - regular_done, 239);
}

mod mutated {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any edit of a valid scenario loads or fails with an error; it never panics.
        #[test]
        fn mutated_scenarios_never_panic(
            at in 0usize..WEIGHTED.len(),
            cut in 0usize..40,
            insert in "[a-z0-9:{}\\[\\], \n-]{0,12}",
        ) {
            // The bundled file is ASCII, so every byte index is a char boundary.
            prop_assert!(WEIGHTED.is_ascii());
            let start = at;
            let end = (start + cut).min(WEIGHTED.len());
            let text = format!("{}{}{}", &WEIGHTED[..start], insert, &WEIGHTED[end..]);
            let _ = Scenario::from_text(Path::new("s.yaml"), &text, &[]);
        }

        /// Any `--set` loads or fails with an error naming its path.
        #[test]
        fn random_overrides_never_panic(path in "[a-z_.\\[\\]0-9]{0,30}", value in "\\PC{0,8}") {
            let overrides = vec![(path.clone(), value)];
            if let Err(e) = Scenario::from_text(Path::new("s.yaml"), WEIGHTED, &overrides) {
                let shown = e.to_string();
                prop_assert!(
                    e.field_path == path || shown.contains(&format!("--set {path}=")),
                    "{shown}"
                );
            }
        }
    }
}

#[test]
fn describe_lists_classes_workers_workload_and_expectations() {
    let scenario = Scenario::load(&bundled("premium-vs-regular-weighted.yaml")).unwrap();
    let text = scenario.describe();
    println!("{text}");
    for needle in [
        "scenario premium-vs-regular-weighted",
        "premium",
        "workers: 1 x dp 1",
        "max_num_seqs 4",
        "prefix caching off",
        "640 requests",
        "burst at 0 ms (alternate, spacing 1 ns)",
        "expectations: 7",
        "minus premium-vs-regular-equal.yaml",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn describe_prints_expectations_as_check_words_them_not_as_json() {
    let scenario = Scenario::load(&bundled("premium-vs-regular-weighted.yaml")).unwrap();
    let text = scenario.describe();
    assert!(
        text.contains("  W premium in first 320 (premium among first 320): at least 240\n"),
        "{text}"
    );
    assert!(!text.contains('{') && !text.contains("\":"), "{text}");
    let capacity = Scenario::load(&bundled("capacity-two-tenants.yaml")).unwrap();
    let text = capacity.describe();
    assert!(
        text.contains("  premium p99 TTFT SLO (premium ttft_ms_p99): at most 2000\n"),
        "{text}"
    );
    assert!(
        text.contains("  keeps up with the load: the run keeps up with its load\n"),
        "{text}"
    );
}

#[test]
fn describe_names_the_router_and_burst_as_a_scenario_spells_them() {
    let scenario = Scenario::load(&bundled("premium-vs-regular-weighted.yaml")).unwrap();
    let text = scenario.describe();
    assert!(
        text.contains("workers: 1 x dp 1, kv_router router;"),
        "{text}"
    );
    for rust_name in ["KvRouter", "Alternate", "Sequential"] {
        assert!(!text.contains(rust_name), "{rust_name} in\n{text}");
    }
}

#[test]
fn describe_shows_no_burst_for_a_rate_workload() {
    let scenario = Scenario::load(&bundled("capacity-two-tenants.yaml")).unwrap();
    let text = scenario.describe();
    assert!(!text.contains("burst"), "{text}");
    assert!(
        text.contains("workload: 2 groups, about 7200 requests; 64 tokens per hash id\n"),
        "{text}"
    );
}

#[test]
fn equal_scenario_reproduces_dynamo_160_160_with_0_left() {
    let scenario = Scenario::load(&bundled("premium-vs-regular-equal.yaml")).unwrap();
    let requests = scenario.requests(0).unwrap();
    let result =
        crate::sim::run(crate::sim::Options::new(run_config(&scenario)), requests).unwrap();
    let order = completion_classes(&result);
    let premium_first = order[..320].iter().filter(|c| *c == "premium").count();
    assert_eq!(premium_first, 160);
    let premium_done = order
        .iter()
        .enumerate()
        .filter(|(_, c)| *c == "premium")
        .nth(319)
        .unwrap()
        .0;
    let regular_done = order[..=premium_done]
        .iter()
        .filter(|c| *c == "regular")
        .count();
    assert_eq!(320 - regular_done, 0);
}

#[test]
fn trace_workloads_read_the_trace_relative_to_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let trace = fixture("../fidelity/premium-weighted/trace.jsonl");
    std::fs::copy(&trace, dir.path().join("t.jsonl")).unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(
        &path,
        "name: t\nworkload:\n  trace: t.jsonl\n  trace_block_size: 512\n",
    )
    .unwrap();
    let scenario = Scenario::load(&path).unwrap();
    let requests = scenario.requests(0).unwrap();
    assert_eq!(requests.len(), 640);
    assert_eq!(requests[0].policy_class.as_deref(), Some("premium"));
    assert!(matches!(
        scenario.workload(),
        Workload::Trace {
            block_size: 512,
            ..
        }
    ));
    std::fs::write(dir.path().join("t.jsonl"), "{\"timestamp\": 0}\n").unwrap();
    let e = Scenario::load(&path).unwrap_err();
    assert_eq!(
        e.file,
        dir.path().join("t.jsonl").display().to_string(),
        "{e}"
    );
    assert_eq!(e.line, Some(1), "{e}");
}

#[test]
fn policy_files_are_read_relative_to_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let policy = include_str!("../../tests/fixtures/policy/premium-regular.yaml");
    std::fs::write(dir.path().join("p.yaml"), policy).unwrap();
    let path = dir.path().join("s.yaml");
    let text = MINIMAL.replace("workers:", "router:\n  policy: p.yaml\nworkers:");
    std::fs::write(&path, &text).unwrap();
    let scenario = Scenario::load(&path).unwrap();
    assert_eq!(scenario.class_names(), ["premium", "regular"]);
    std::fs::write(
        dir.path().join("p.yaml"),
        policy.replace("quantum: 128", "quantum: 0"),
    )
    .unwrap();
    let e = Scenario::load(&path).unwrap_err();
    assert_eq!(
        e.file,
        dir.path().join("p.yaml").display().to_string(),
        "{e}"
    );
    assert!(
        e.line.is_some() && e.message.contains("quantum must be > 0"),
        "{e}"
    );
    std::fs::remove_file(dir.path().join("p.yaml")).unwrap();
    let e = Scenario::load(&path).unwrap_err();
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(3), "router.policy"),
        "{e}"
    );
    let both = text.replace(
        "  policy: p.yaml\n",
        "  policy: p.yaml\n  default_policy_family: x\n",
    );
    let e = error_of(&both);
    assert!(e.message.contains("not both"), "{e}");
}

#[test]
fn limits_delays_engine_and_router_mode_reach_the_sim_config() {
    let text = format!(
        "{}router:\n  router_mode: round_robin\n  router_temperature: 0.25\nlimits: {{max_events: 1000, max_time_ms: 2.5}}\ndelays: {{router_to_worker_ms: 1, worker_to_router_ms: 0.5, kv_event_lag_ms: 3}}\n",
        MINIMAL.replace(
            "engine: {max_num_seqs: 4}",
            "dp_size: 2\n  engine: {max_num_seqs: 4, block_size: 16}"
        )
    );
    let scenario = Scenario::from_text(Path::new("s.yaml"), &text, &[]).unwrap();
    let config = scenario.config();
    assert_eq!(config.seed(), scenario.seed());
    assert_eq!(config.router_mode(), RouterMode::RoundRobin);
    assert_eq!(config.router().router_temperature, 0.25);
    assert_eq!(config.limits().max_events, 1000);
    assert_eq!(config.limits().max_time.as_ns(), 2_500_000);
    assert_eq!(config.delays().router_to_worker.as_ns(), 1_000_000);
    assert_eq!(config.delays().worker_to_router.as_ns(), 500_000);
    assert_eq!(config.delays().kv_event_lag.as_ns(), 3_000_000);
    assert_eq!(
        (
            config.pools()[0].engine.common.capacity.max_num_seqs,
            config.block_size()
        ),
        (4, 16)
    );
    assert_eq!(config.pools()[0].engine.common.dp_size, 2);
    let e = error_of(&text.replace("kv_event_lag_ms: 3", "kv_event_lag_ms: -3"));
    assert_eq!(e.field_path, "delays.kv_event_lag_ms", "{e}");
    let e = error_of(&text.replace("router_temperature: 0.25", "router_temperature: -1"));
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(11), "router.router_temperature"),
        "{e}"
    );
    let e = error_of(&text.replace("max_events: 1000", "max_events: 0"));
    assert_eq!(e.field_path, "limits.max_events", "{e}");
}

#[test]
fn pinned_workers_are_validated_and_carried_by_the_requests() {
    let text = MINIMAL.replace(
        "output_tokens: 1}",
        "output_tokens: 1, pinned_worker: {worker_id: 0}}",
    );
    let scenario = Scenario::from_text(Path::new("s.yaml"), &text, &[]).unwrap();
    let synth = scenario.synth_requests(0).unwrap();
    assert!(synth.iter().all(|r| r.pinned_worker
        == Some(WorkerWithDpRank {
            worker_id: 0,
            dp_rank: 0
        })));
    let requests = scenario.requests(0).unwrap();
    assert!(
        requests
            .iter()
            .all(|r| r.pinned_worker == Some(WorkerWithDpRank::new(0, 0)))
    );
    let e = error_of(&text.replace("worker_id: 0", "worker_id: 1"));
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(7), "workload.groups.a.pinned_worker.worker_id"),
        "{e}"
    );
}

#[test]
fn groups_arrive_as_written() {
    let text = "\
name: arrivals
workload:
  burst: {at_ms: 10, order: round_robin, spacing_ns: 2}
  groups:
    - {name: a, count: 2, input_tokens: 64, output_tokens: 1}
    - {name: b, count: 2, input_tokens: 64, output_tokens: 1}
    - {name: c, count: 3, input_tokens: 64, output_tokens: 1, arrival: {at_ms: [0, 10, 20]}}
    - {name: d, count: 2, input_tokens: 64, output_tokens: 1, arrival: {interval: {every_ms: 4, start_ms: 1}}}
";
    let scenario = Scenario::from_text(Path::new("s.yaml"), text, &[]).unwrap();
    let got: Vec<(u64, String)> = scenario
        .requests(0)
        .unwrap()
        .into_iter()
        .map(|r| {
            (
                r.arrival.as_ns(),
                r.policy_class.unwrap_or_else(|| "?".into()),
            )
        })
        .collect();
    let ms = 1_000_000;
    assert!(
        got.iter().all(|(_, c)| c == "?"),
        "groups without class ask for none"
    );
    let times: Vec<u64> = got.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        times,
        [
            0,
            ms,
            5 * ms,
            10 * ms,
            10 * ms,
            10 * ms + 2,
            10 * ms + 4,
            10 * ms + 6,
            20 * ms
        ]
    );
    let e = error_of(&text.replace("[0, 10, 20]", "[0, 10]"));
    assert_eq!(
        (e.line, e.field_path.as_str()),
        (Some(7), "workload.groups.c.arrival.at_ms"),
        "{e}"
    );
}

#[test]
fn set_reaches_expectations_and_engine_keys_by_name() {
    let path = bundled("premium-vs-regular-weighted.yaml");
    let overrides = set(&[
        ("expect.W regular in first 320.at_least", "50"),
        ("workers.engine.enable_prefix_caching", "true"),
        ("workload.burst.spacing_ns", "0"),
    ]);
    let scenario = Scenario::load_with_overrides(&path, &overrides).unwrap();
    assert_eq!(
        scenario.expectations()[1].bound(),
        crate::report::verdict::expect::Bound::AtLeast(50.0)
    );
    assert!(scenario.pools()[0].engine.common.enable_prefix_caching);
    let requests = scenario.requests(0).unwrap();
    assert!(requests.iter().all(|r| r.arrival.as_ns() == 0));
    let e = Scenario::load_with_overrides(
        &path,
        &set(&[("expect.W regular in first 320.at_least", "[1]")]),
    )
    .unwrap_err();
    assert_eq!(e.line, Some(51), "{e}");
    assert!(
        e.message.contains("got `[1]`"),
        "a value never becomes a list: {e}"
    );
}

#[test]
fn scenario_keys_are_every_top_level_field_a_scenario_takes() {
    let e = serde_json::from_str::<raw::RawScenario>(r#"{"bogus": 1}"#).unwrap_err();
    let expected: Vec<String> = raw::SCENARIO_KEYS
        .iter()
        .map(|k| format!("`{k}`"))
        .collect();
    let wanted = format!("expected one of {}", expected.join(", "));
    assert!(e.to_string().contains(&wanted), "{e}");
}

#[test]
fn a_scenario_names_its_policy_with_policy_not_router_policy_config() {
    let text = format!("{MINIMAL}router: {{router_policy_config: p.yaml}}\n");
    let e = error_of(&text);
    assert_eq!(e.field_path, "router.router_policy_config", "{e}");
    assert!(e.message.contains("policy: FILE"), "{e}");
}
