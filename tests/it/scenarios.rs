//! Scenarios end to end: run, check, validate; expectations as a CI gate; determinism.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
}

fn stdout_of(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    )
}

#[test]
fn check_passes_the_bundled_premium_scenarios_and_shows_the_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let junit = tmp.path().join("junit.xml");
    let (code, stdout, stderr) = stdout_of(
        routersim()
            .arg("check")
            .arg(scenario("premium-vs-regular-weighted.yaml"))
            .arg(scenario("premium-vs-regular-equal.yaml"))
            .arg("--junit")
            .arg(&junit),
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    for line in [
        "PASS  W premium in first 320 = 255",
        "PASS  W regular in first 320 = 65",
        "PASS  W regular left when premium finishes = 239",
        "PASS  E premium in first 320 = 160",
        "PASS  E regular left when premium finishes = 0",
        "all 9 expectations pass",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
    let xml = fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<testsuite") && xml.contains("tests=\"7\""),
        "{xml}"
    );
}

#[test]
fn check_fails_with_exit_1_when_a_quantum_change_breaks_an_expectation() {
    let (code, stdout, stderr) = stdout_of(
        routersim()
            .arg("check")
            .arg(scenario("premium-vs-regular-weighted.yaml"))
            .args(["--set", "router.policy_classes.regular.quantum=512"]),
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("FAIL  W premium in first 320 = 160  (at least 240)"),
        "{stdout}"
    );
    assert!(stderr.contains("expectations failed"), "{stderr}");
}

#[test]
fn malformed_expectations_are_bad_input_naming_the_place() {
    let tmp = tempfile::tempdir().unwrap();
    let text = fs::read_to_string(scenario("premium-vs-regular-equal.yaml")).unwrap();
    let cases = [
        ("{prefix_count: {class: gold, n: 320}, at_least: 1}", "gold"),
        (
            "{prefix_count: {class: premium, n: 320}, within: [9, 1]}",
            "within",
        ),
        (
            "{latency: {class: premium, metric: ttft_ms_p42}, at_most: 1}",
            "ttft_ms_p42",
        ),
        (
            "{growth: {class: regular, when: premium, from: 80, to: 80}, at_least: 1}",
            "growth.to: must be greater than from (80), got 80",
        ),
        (
            "{prefix_share: {class: premium, n: 320}, at_least: 75}",
            "at_least: a share is a fraction in [0, 1], got 75",
        ),
        (
            "{token_share: {class: premium}, at_least: 0.1, at_most: 0.2}",
            "needs exactly one bound",
        ),
    ];
    for (i, (expectation, named)) in cases.iter().enumerate() {
        let file = tmp.path().join(format!("bad-{i}.yaml"));
        let (head, _) = text.split_once("expect:").unwrap();
        fs::write(&file, format!("{head}expect:\n  - {expectation}\n")).unwrap();
        let (code, _, stderr) = stdout_of(routersim().arg("check").arg(&file));
        assert_eq!(code, 2, "{expectation}: {stderr}");
        let line = head.lines().count() + 2;
        assert!(
            stderr.contains(&format!("bad-{i}.yaml:{line}: expect.0")),
            "file and line of the entry: {stderr}"
        );
        assert!(
            stderr.contains("expect.0") || stderr.contains("expect[0]"),
            "{stderr}"
        );
        assert!(stderr.contains(named), "{stderr}");
    }
}

#[test]
fn run_writes_every_file_and_is_byte_identical_on_a_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |dir: &str| {
        let out = tmp.path().join(dir);
        let (code, stdout, stderr) = stdout_of(
            routersim()
                .arg("run")
                .arg(scenario("poisson-multi-worker.yaml"))
                .arg("--out")
                .arg(&out),
        );
        assert_eq!(code, 0, "{stdout}{stderr}");
        let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    };
    let first = run("a");
    let names: Vec<&str> = first.iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        "requests.csv",
        "completions.csv",
        "classes.csv",
        "summary.json",
        "completions_by_index.png",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }
    assert_eq!(first, run("b"), "a rerun must give the same bytes");
}

#[test]
fn run_with_another_seed_changes_a_random_workload() {
    let tmp = tempfile::tempdir().unwrap();
    let requests = |seed: &str| {
        let out = tmp.path().join(seed);
        routersim()
            .arg("run")
            .arg(scenario("poisson-multi-worker.yaml"))
            .args(["--quiet", "--seed", seed, "--out"])
            .arg(&out)
            .assert()
            .success();
        fs::read(out.join("requests.csv")).unwrap()
    };
    assert_ne!(requests("1"), requests("2"));
}

#[test]
fn bad_scenarios_exit_2_naming_file_line_and_field_without_output() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scenarios");
    for entry in fs::read_dir(&fixtures).unwrap() {
        let path = entry.unwrap().path();
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let (code, _, stderr) = stdout_of(routersim().arg("run").arg(&path).arg("--out").arg(&out));
        assert_eq!(code, 2, "{}: {stderr}", path.display());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(stderr.contains(&name), "{stderr}");
        assert!(!out.exists(), "no output for a bad scenario");
    }
    let (code, _, stderr) = stdout_of(routersim().arg("run").arg("no/such/file.yaml"));
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn bad_set_paths_and_values_name_the_path() {
    let weighted = scenario("premium-vs-regular-weighted.yaml");
    for (set, named) in [
        ("router.policy_classes.gold.quantum=5", "gold"),
        ("workers.count=many", "workers.count"),
        ("router.policy_classes.regular.quantum", "PATH=VALUE"),
    ] {
        let (code, _, stderr) = stdout_of(
            routersim()
                .arg("validate")
                .arg(&weighted)
                .args(["--set", set]),
        );
        assert_eq!(code, 2, "{set}: {stderr}");
        assert!(stderr.contains(named), "{set}: {stderr}");
    }
}

/// The bundled scenario files (`scenarios/*.yaml`; `scenarios/profiles/` holds their data).
fn bundled_scenarios() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn validate_accepts_every_bundled_scenario() {
    for path in bundled_scenarios() {
        let (code, stdout, stderr) = stdout_of(routersim().arg("validate").arg(&path));
        assert_eq!(code, 0, "{}: {stderr}", path.display());
        assert!(stdout.contains("valid scenario"), "{stdout}");
    }
}

#[test]
fn committed_results_are_what_the_bundled_scenarios_produce() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    for path in bundled_scenarios() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let out = tmp.path().join(&name);
        routersim()
            .arg("run")
            .arg(&path)
            .arg("--quiet")
            .arg("--out")
            .arg(&out)
            .assert()
            .success();
        for file in [
            "requests.csv",
            "completions.csv",
            "classes.csv",
            "summary.json",
            routersim::report::output::MARKER,
        ] {
            let committed = root.join("results").join(&name).join(file);
            let fresh = fs::read(out.join(file)).unwrap();
            assert!(
                fs::read(&committed).is_ok_and(|c| c == fresh),
                "{} is stale: rerun `routersim run {}`",
                committed.display(),
                path.display()
            );
        }
    }
}

/// Premium's count among the first 320 completions of the weighted scenario.
fn premium_first_320(set: &str, seed: u64) -> u64 {
    let weighted = scenario("premium-vs-regular-weighted.yaml");
    premium_first_320_of(&weighted, &["--set", set, "--seed", &seed.to_string()])
}

#[test]
fn seeded_arrival_jitter_spreads_the_shares_like_live_runs() {
    let counts: Vec<u64> = (1..=6)
        .map(|seed| premium_first_320("delays.arrival_jitter_ns=1000", seed))
        .collect();
    assert!(counts.iter().all(|c| (250..=260).contains(c)), "{counts:?}");
    assert!(
        counts.iter().any(|c| *c != counts[0]),
        "the seed must matter: {counts:?}"
    );
    assert_eq!(
        premium_first_320("delays.arrival_jitter_ns=1000", 3),
        counts[2],
        "and be reproducible"
    );
}

/// The bundled equal arm with `expect:` replaced by `expectations`, written into `dir`.
fn equal_arm_expecting(dir: &Path, expectations: &str) -> PathBuf {
    let text = fs::read_to_string(scenario("premium-vs-regular-equal.yaml")).unwrap();
    let (head, _) = text.split_once("expect:").unwrap();
    let file = dir.join("share.yaml");
    fs::write(&file, format!("{head}expect:\n{expectations}")).unwrap();
    file
}

#[test]
fn check_gates_on_a_prefix_share_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let pass = "  - {prefix_share: {class: premium, n: 320}, within: [0.45, 0.55]}\n";
    let file = equal_arm_expecting(tmp.path(), pass);
    let (code, stdout, stderr) = stdout_of(routersim().arg("check").arg(&file));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("PASS  premium share of first 320 = 0.5  (within [0.45, 0.55])"),
        "{stdout}"
    );
    let fail = "  - {name: premium gets three quarters, prefix_share: {class: premium, n: 320}, at_least: 0.75}\n";
    let file = equal_arm_expecting(tmp.path(), fail);
    let (code, stdout, stderr) = stdout_of(routersim().arg("check").arg(&file));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("FAIL  premium gets three quarters = 0.5  (at least 0.75)"),
        "{stdout}"
    );
}

#[test]
fn check_counts_a_single_expectation_in_the_singular() {
    let tmp = tempfile::tempdir().unwrap();
    let pass = "  - {prefix_share: {class: premium, n: 320}, within: [0.45, 0.55]}\n";
    let file = equal_arm_expecting(tmp.path(), pass);
    let (code, stdout, stderr) = stdout_of(routersim().arg("check").arg(&file));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("(seed 0): 1 expectation\n"), "{stdout}");
    assert!(stdout.ends_with("the expectation passes\n"), "{stdout}");
    let fail = "  - {prefix_share: {class: premium, n: 320}, at_least: 0.75}\n";
    let file = equal_arm_expecting(tmp.path(), fail);
    let (code, stdout, stderr) = stdout_of(routersim().arg("check").arg(&file));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("the expectation failed"), "{stderr}");
    assert!(!stdout.contains("1 expectations") && !stderr.contains("1 of 1"));
}

/// The JUnit file with every `time="..."` attribute replaced by `time="T"`: wall times are
/// the only bytes that differ between runs.
fn junit_masked(path: &Path) -> String {
    let xml = fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut rest = xml.as_str();
    while let Some(at) = rest.find(" time=\"") {
        let value_start = at + " time=\"".len();
        let value_len = rest[value_start..].find('"').unwrap();
        out += &rest[..at];
        out += " time=\"T\"";
        rest = &rest[value_start + value_len + 1..];
    }
    out + rest
}

#[test]
fn junit_carries_time_value_bound_and_seed_and_failures_name_the_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let file = equal_arm_expecting(
        tmp.path(),
        "  - {prefix_share: {class: premium, n: 320}, at_least: 0.75}\n  - {prefix_count: {class: premium, n: 320}, at_least: 100}\n",
    );
    let junit = tmp.path().join("junit.xml");
    let check = || {
        stdout_of(
            routersim()
                .arg("check")
                .arg(&file)
                .arg("--junit")
                .arg(&junit)
                .args(["--set", "seed=3"]),
        )
    };
    let (code, stdout, stderr) = check();
    assert_eq!(code, 1, "{stdout}{stderr}");
    let xml = fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let cases: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 2);
    for case in &cases {
        let time = case.attribute("time").unwrap();
        let (whole, millis) = time.split_once('.').expect("seconds with a fraction");
        assert!(
            whole.parse::<u64>().unwrap() < 600,
            "wall time in seconds: {time}"
        );
        assert_eq!(millis.len(), 3, "to the millisecond: {time}");
    }
    let property = |case: roxmltree::Node, name: &str| {
        case.descendants()
            .find(|p| p.has_tag_name("property") && p.attribute("name") == Some(name))
            .and_then(|p| p.attribute("value"))
            .map(str::to_string)
    };
    assert_eq!(property(cases[0], "value").as_deref(), Some("0.5"));
    assert_eq!(
        property(cases[0], "bound").as_deref(),
        Some("at least 0.75")
    );
    assert_eq!(property(cases[0], "seed").as_deref(), Some("3"));
    assert_eq!(property(cases[1], "value").as_deref(), Some("160"));
    let failure = cases[0]
        .children()
        .find(|n| n.has_tag_name("failure"))
        .expect("a failure element");
    assert_eq!(
        failure.attribute("message"),
        Some("FAIL  premium share of first 320 = 0.5  (at least 0.75) on seed 3")
    );
    assert!(cases[1].children().all(|n| !n.has_tag_name("failure")));
    let first = junit_masked(&junit);
    check();
    assert_eq!(
        junit_masked(&junit),
        first,
        "only the times differ between runs"
    );
}

/// The weighted scenario with its policy kept in its own file, `dir/p.yaml`, as CI keeps
/// the production policy: `router: {policy: p.yaml}`. Returns the scenario's path.
fn weighted_with_policy_file(dir: &Path) -> PathBuf {
    let text = fs::read_to_string(scenario("premium-vs-regular-weighted.yaml")).unwrap();
    let start = text.find("\nrouter:\n").unwrap() + 1;
    let end = text.find("\nworkers:\n").unwrap() + 1;
    let policy: String = text[start..end]
        .lines()
        .skip(1)
        .map(|line| format!("{}\n", &line[2..]))
        .collect();
    fs::write(dir.join("p.yaml"), policy).unwrap();
    let body = format!(
        "{}router: {{policy: p.yaml}}\n{}",
        &text[..start],
        &text[end..]
    );
    fs::write(dir.join("s.yaml"), body).unwrap();
    fs::copy(
        scenario("premium-vs-regular-equal.yaml"),
        dir.join("premium-vs-regular-equal.yaml"),
    )
    .unwrap();
    dir.join("s.yaml")
}

/// Premium's count among the first 320 completions of `path` run with `args` (`--set`s).
fn premium_first_320_of(path: &Path, args: &[&str]) -> u64 {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let mut cmd = routersim();
    cmd.arg("run").arg(path).arg("--quiet").args(args);
    let (code, _, stderr) = stdout_of(cmd.arg("--out").arg(&out));
    assert_eq!(code, 0, "{stderr}");
    let completions = fs::read_to_string(out.join("completions.csv")).unwrap();
    let mut reader = csv::Reader::from_reader(completions.as_bytes());
    let premium = reader
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "premium")
        .expect("a premium column");
    let row = reader.records().nth(319).unwrap().unwrap();
    row[premium].parse().unwrap()
}

#[test]
fn set_reaches_a_policy_kept_in_its_own_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = weighted_with_policy_file(tmp.path());
    let equal_quanta = "router.policy_classes.regular.quantum=512";
    // As the bundled equal scenario (quanta 512:512): 160 of the first 320.
    assert_eq!(
        premium_first_320_of(&scenario("premium-vs-regular-equal.yaml"), &[]),
        160
    );
    assert_eq!(premium_first_320_of(&path, &["--set", equal_quanta]), 160);
    assert!(
        premium_first_320_of(&path, &[]) > 240,
        "the file's own 512:128"
    );
    let (code, stdout, stderr) = stdout_of(
        routersim()
            .arg("validate")
            .arg(&path)
            .args(["--set", equal_quanta]),
    );
    assert_eq!(code, 0, "{stderr}");
    let regular = stdout
        .lines()
        .find(|l| l.contains("regular") && l.contains("512"));
    assert!(
        regular.is_some(),
        "the regular class has quantum 512:\n{stdout}"
    );
}

#[test]
fn set_errors_in_a_policy_file_name_the_file_line_and_path() {
    let tmp = tempfile::tempdir().unwrap();
    let path = weighted_with_policy_file(tmp.path());
    for (set, expected) in [
        (
            "router.policy_classes.regular.quantum=0",
            "p.yaml:16: router.policy_classes.regular.quantum: --set router.policy_classes.regular.quantum=0: ",
        ),
        (
            "router.policy_classes.regular.queue_policy=lifo",
            "p.yaml:15: router.policy_classes.regular.queue_policy: ",
        ),
        (
            "router.policy_classes.gold.quantum=1",
            "cannot add list entries",
        ),
    ] {
        let (code, _, stderr) =
            stdout_of(routersim().arg("validate").arg(&path).args(["--set", set]));
        assert_eq!(code, 2, "{set}: {stderr}");
        assert!(stderr.contains(expected), "{set}: {stderr}");
    }
}

#[test]
fn set_reaches_a_field_the_file_leaves_at_its_default() {
    let tmp = tempfile::tempdir().unwrap();
    let text = fs::read_to_string(scenario("premium-vs-regular-weighted.yaml")).unwrap();
    let no_delays: String = text
        .lines()
        .filter(|line| !line.starts_with("delays:"))
        .map(|line| format!("{line}\n"))
        .collect();
    let path = tmp.path().join("no-delays.yaml");
    fs::write(&path, no_delays).unwrap();
    fs::copy(
        scenario("premium-vs-regular-equal.yaml"),
        tmp.path().join("premium-vs-regular-equal.yaml"),
    )
    .unwrap();
    let jitter = "delays.arrival_jitter_ns=1000";
    // The same counts as the bundled file (which has a `delays:` block) under the same set;
    // the jitter shows (some seed differs from the unjittered run).
    let jittered: Vec<u64> = ["1", "2", "3"]
        .iter()
        .map(|seed| premium_first_320_of(&path, &["--set", jitter, "--seed", seed]))
        .collect();
    let bundled: Vec<u64> = (1..=3)
        .map(|seed| premium_first_320(jitter, seed))
        .collect();
    assert_eq!(jittered, bundled);
    let plain = premium_first_320_of(&path, &[]);
    assert!(
        jittered.iter().any(|c| *c != plain),
        "{jittered:?} vs {plain}"
    );
    let (code, stdout, stderr) = stdout_of(routersim().arg("validate").arg(&path).args([
        "--set",
        jitter,
        "--set",
        "workers.dp_size=2",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("workers: 1 x dp 2"), "{stdout}");
}

#[test]
fn unknown_values_and_duplicate_keys_name_the_file_line_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let text = fs::read_to_string(scenario("premium-vs-regular-equal.yaml")).unwrap();
    let cases = [
        (
            text.replace("order: alternate", "order: zigzag"),
            "s.yaml:40: workload.burst.order: unknown value `zigzag`, expected one of sequential, round_robin, alternate",
        ),
        (
            text.replace(
                "    max_num_seqs: 4\n",
                "    max_num_seqs: 4\n    preemption_mode: newest\n",
            ),
            "s.yaml:36: workers.engine.preemption_mode: unknown value `newest`, expected one of lifo, fifo",
        ),
        (
            text.replace("max_num_seqs: 4", "max_num_seqs: four"),
            "s.yaml:35: workers.engine.max_num_seqs: expected a whole number >= 0, got `four`",
        ),
        (
            text.replacen("queue_policy: fcfs", "queue_policy: lifo", 1),
            "s.yaml:20: router.policy_classes.premium.queue_policy: unknown value `lifo`",
        ),
        (
            text.replace("seed: 0\n", "seed: 0\nseed: 1\n"),
            "s.yaml:12: seed: duplicate key `seed`",
        ),
    ];
    for (body, expected) in cases {
        let path = tmp.path().join("s.yaml");
        fs::write(&path, body).unwrap();
        let (code, _, stderr) = stdout_of(routersim().arg("validate").arg(&path));
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(expected), "{expected}\n{stderr}");
        assert!(!stderr.contains("DuplicateKeyPolicy"), "{stderr}");
    }
}

#[test]
fn unknown_values_in_a_policy_file_name_the_file_line_and_class() {
    let tmp = tempfile::tempdir().unwrap();
    let path = weighted_with_policy_file(tmp.path());
    let policy = tmp.path().join("p.yaml");
    let text = fs::read_to_string(&policy).unwrap();
    fs::write(
        &policy,
        text.replacen("queue_policy: fcfs", "queue_policy: lifo", 1),
    )
    .unwrap();
    let expected = "p.yaml:8: root: class \"premium\": queue_policy: unknown value `lifo`, expected one of fcfs, wspt, lcfs";
    let (code, _, stderr) = stdout_of(routersim().arg("validate").arg(&policy));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(expected), "{stderr}");
    let (code, _, stderr) = stdout_of(routersim().arg("validate").arg(&path));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("p.yaml:8: router.policy_classes.premium.queue_policy: "),
        "{stderr}"
    );
}
