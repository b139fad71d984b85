//! One rule for where every command writes (`results/<name>/` for `run`,
//! `results/<name>-<command>/` for the others, a plan's directory naming its search), the
//! flags every command spells alike (`--seed`, `--seeds`, `--quiet`), and `check --report`'s
//! page as a person sees it.

use crate::report_page::{chromium, headless};
use crate::support::run_in_dir;
use std::fs;
use std::path::{Path, PathBuf};

fn bundled(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
        .display()
        .to_string()
}

/// The entries of `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

const WEIGHTED: &str = "premium-vs-regular-weighted.yaml";
const QUANTUM_AXIS: &str = "router.policy_classes.regular.quantum=64,128";

#[test]
fn without_out_every_command_writes_under_results_named_by_scenario_and_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = bundled(WEIGHTED);
    let runs: [&[&str]; 4] = [
        &["run", &scenario, "--quiet"],
        &["check", &scenario, "--quiet", "--report"],
        &["sweep", &scenario, "--quiet", "--set", QUANTUM_AXIS],
        &[
            "sweep",
            &scenario,
            "--quiet",
            "--set",
            QUANTUM_AXIS,
            "--shard",
            "1/2",
        ],
    ];
    for args in runs {
        let (code, _, stderr) = run_in_dir(dir, args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
    }
    assert_eq!(entries(dir), ["results"], "nothing lands outside results/");
    assert_eq!(
        entries(&dir.join("results")),
        [
            "premium-vs-regular-weighted",
            "premium-vs-regular-weighted-check",
            "premium-vs-regular-weighted-sweep",
            "premium-vs-regular-weighted-sweep-shard-1-of-2",
        ]
    );
    let sweep = dir.join("results/premium-vs-regular-weighted-sweep");
    assert!(sweep.join("sweep.csv").is_file() && sweep.join("report.html").is_file());
}

#[test]
fn a_merge_without_out_writes_where_the_whole_sweep_would() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = bundled(WEIGHTED);
    for shard in ["1/2", "2/2"] {
        let args = [
            "sweep",
            &scenario,
            "--quiet",
            "--set",
            QUANTUM_AXIS,
            "--shard",
            shard,
        ];
        assert_eq!(run_in_dir(dir, &args).0, 0);
    }
    let shards = [
        "results/premium-vs-regular-weighted-sweep-shard-1-of-2",
        "results/premium-vs-regular-weighted-sweep-shard-2-of-2",
    ];
    let (code, _, stderr) = run_in_dir(dir, &["merge", shards[0], shards[1]]);
    assert_eq!(code, 0, "{stderr}");
    let whole = "results/premium-vs-regular-weighted-sweep";
    let (code, _, stderr) = run_in_dir(
        dir,
        &[
            "sweep",
            &scenario,
            "--quiet",
            "--set",
            QUANTUM_AXIS,
            "--out",
            "unsharded",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        fs::read(dir.join(whole).join("sweep.csv")).unwrap(),
        fs::read(dir.join("unsharded/sweep.csv")).unwrap()
    );
}

#[test]
fn a_replay_without_out_writes_under_results_named_by_its_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fidelity/premium-weighted");
    let trace = fixture.join("dynamo.trace.jsonl");
    fs::copy(&trace, tmp.path().join("night.jsonl")).unwrap();
    let policy = fixture.join("policy.yaml").display().to_string();
    let args = [
        "replay",
        "--trace",
        "night.jsonl",
        "--policy",
        &policy,
        "--quiet",
    ];
    let (code, _, stderr) = run_in_dir(tmp.path(), &args);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        tmp.path()
            .join("results/night-replay/requests.csv")
            .is_file()
    );
}

/// Runs a small plan of the two-tenant scenario in `dir` with `goal` flags; returns stdout.
fn plan(dir: &Path, goal: &[&str]) -> String {
    let scenario = bundled("capacity-two-tenants.yaml");
    let mut args = vec!["plan", &scenario];
    args.extend(goal);
    let (code, stdout, stderr) = run_in_dir(dir, &args);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    stdout
}

#[test]
fn a_maximize_plan_keeps_apart_from_an_earlier_minimize_plan_of_the_same_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let short = ["--set", "workload.duration_s=5"];
    plan(
        dir,
        &[
            &short[..],
            &["--minimize", "workers.count", "--range", "1..16"],
        ]
        .concat(),
    );
    let min = dir.join("results/capacity-two-tenants-plan-minimize-workers.count/plan.json");
    let before = fs::read(&min).unwrap();
    let stdout = plan(
        dir,
        &[
            "--maximize",
            "workload.rate_per_s",
            "--range",
            "1..80",
            "--set",
            "workers.count=4",
        ],
    );
    let max = "results/capacity-two-tenants-plan-maximize-workload.rate_per_s";
    assert!(stdout.contains(max), "{stdout}");
    assert!(dir.join(max).join("plan.json").is_file());
    assert_eq!(
        fs::read(&min).unwrap(),
        before,
        "the first plan is left as it was"
    );
}

/// `requests.csv` of `dir/out`.
fn requests(dir: &Path, out: &str) -> Vec<u8> {
    fs::read(dir.join(out).join("requests.csv")).unwrap()
}

#[test]
fn seed_is_the_seed_override_on_every_command_that_runs_a_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = bundled("poisson-multi-worker.yaml");
    let pairs: [(&[&str], &[&str]); 2] = [
        (&["--seed", "7"], &["--set", "seed=7"]),
        (
            &["--seed", "7", "--seeds", "2"],
            &["--set", "seed=7", "--seeds", "2"],
        ),
    ];
    for (i, (flag, set)) in pairs.iter().enumerate() {
        let outs = [format!("flag{i}"), format!("set{i}")];
        for (out, spelling) in outs.iter().zip([flag, set]) {
            let mut args = vec!["check", &scenario, "--quiet", "--out", out];
            args.extend(spelling.iter());
            assert!(run_in_dir(dir, &args).0 <= 1);
        }
        assert_eq!(requests(dir, &outs[0]), requests(dir, &outs[1]));
    }
    let sweep = |out: &str, extra: &[&str]| {
        let mut args = vec![
            "sweep",
            &scenario,
            "--quiet",
            "--out",
            out,
            "--set",
            "workers.count=3,4",
        ];
        args.extend(extra);
        assert_eq!(run_in_dir(dir, &args).0, 0);
        fs::read_to_string(dir.join(out).join("sweep.csv")).unwrap()
    };
    let by_flag = sweep("s-flag", &["--seed", "7"]);
    assert_eq!(by_flag, sweep("s-set", &["--set", "seed=7"]));
    assert_ne!(
        by_flag,
        sweep("s-default", &[]),
        "the seed changed the runs"
    );
    assert_eq!(
        by_flag.lines().next().unwrap().matches(",seed,").count(),
        1,
        "one seed column"
    );
}

#[test]
fn quiet_prints_nothing_on_every_command_that_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = bundled(WEIGHTED);
    let runs: [&[&str]; 4] = [
        &["run", &scenario, "--quiet", "--out", "a"],
        &["check", &scenario, "--quiet"],
        &[
            "sweep",
            &scenario,
            "--quiet",
            "--set",
            QUANTUM_AXIS,
            "--out",
            "b",
            "--arrival-jitter-ns",
            "5",
        ],
        &["tune", &scenario, "--quiet", "--target", "premium=0.8"],
    ];
    for args in runs {
        let (code, stdout, stderr) = run_in_dir(dir, args);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (0, "", ""),
            "{args:?}"
        );
    }
}

#[test]
fn the_old_arrival_jitter_flag_still_works_and_names_the_set_that_replaces_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = bundled(WEIGHTED);
    let base = ["sweep", &scenario, "--set", QUANTUM_AXIS];
    let mut old = base.to_vec();
    old.extend(["--out", "old", "--arrival-jitter-ns", "1000"]);
    let (code, _, stderr) = run_in_dir(dir, &old);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("--set delays.arrival_jitter_ns=1000"),
        "{stderr}"
    );
    let mut new = base.to_vec();
    new.extend([
        "--out",
        "new",
        "--set",
        "delays.arrival_jitter_ns=1000",
        "--quiet",
    ]);
    assert_eq!(run_in_dir(dir, &new).0, 0);
    let csv = |out: &str| fs::read_to_string(dir.join(out).join("sweep.csv")).unwrap();
    let rows = |text: String| {
        text.lines()
            .skip(1)
            .map(|l| l.split_once(',').unwrap().1.to_string())
            .collect::<Vec<_>>()
    };
    // The same runs: the new spelling adds only its one-value axis column.
    let old_rows = rows(csv("old"));
    let new_rows: Vec<String> = rows(csv("new"))
        .into_iter()
        .map(|l| l.replacen(",1000,", ",", 1))
        .collect();
    assert_eq!(old_rows, new_rows);
}

#[test]
fn check_out_takes_one_scenario_and_refuses_several_before_any_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (bundled(WEIGHTED), bundled("premium-vs-regular-equal.yaml"));
    let (code, _, stderr) = run_in_dir(tmp.path(), &["check", &a, &b, "--out", "x"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--out takes one scenario"), "{stderr}");
    assert!(!tmp.path().join("x").exists());
}

/// On load, writes the page's visible text into `pre#text`.
const VISIBLE_TEXT: &str = "<script>addEventListener('load',function(){var t=document.body.innerText;\
var p=document.createElement('pre');p.id='text';p.textContent=t;document.body.appendChild(p);});</script>";

/// The text a person sees on `report`.
pub(crate) fn visible_text(browser: &str, dir: &Path, report: &Path) -> String {
    let page = fs::read_to_string(report).unwrap().replacen(
        "</body>",
        &format!("{VISIBLE_TEXT}</body>"),
        1,
    );
    let checked: PathBuf = report.with_file_name("text.html");
    fs::write(&checked, page).unwrap();
    let flags = [
        "--window-size=1280,4000",
        "--virtual-time-budget=5000",
        "--dump-dom",
    ];
    let (dom, _) = headless(browser, &dir.join("profile-text"), &flags, &checked);
    let start = dom.rfind("<pre id=\"text\">").expect("the script ran") + 15;
    let end = start + dom[start..].find("</pre>").unwrap();
    dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[test]
fn in_a_browser_a_check_report_shows_the_verdicts_over_every_seed_and_which_run_is_drawn() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = bundled(WEIGHTED);
    let equal = "router.policy_classes.regular.quantum=512";
    let args = [
        "check", &scenario, "--seeds", "2", "--report", "--set", equal, "--junit", "j.xml",
    ];
    let (code, stdout, _) = run_in_dir(dir, &args);
    assert_eq!(
        code, 1,
        "equal quanta fail the share expectations: {stdout}"
    );
    let out = dir.join("results/premium-vs-regular-weighted-check");
    let text = visible_text(browser, dir, &out.join("report.html"));
    assert!(text.contains("routersim check"), "{text}");
    assert!(text.contains("the worst of 2 seeds"), "{text}");
    assert!(text.contains("the run on seed 0"), "{text}");
    // Every verdict check printed is on the page, with its figure.
    for line in stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("FAIL") || l.trim_start().starts_with("PASS"))
    {
        let label = line.trim_start()[4..].trim_start();
        let label = label
            .split("  [")
            .next()
            .unwrap()
            .split(" = ")
            .next()
            .unwrap();
        assert!(text.contains(label), "{label} is not on the page:\n{text}");
    }
    assert!(text.contains("FAIL") && text.contains("PASS"));
    assert!(out.join("requests.csv").is_file() && out.join("token_share.svg").is_file());
}
