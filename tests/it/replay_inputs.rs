//! What a replay says about its inputs: the engine and router settings it ran, in full (in
//! summary.json, on the terminal and on report.html), and the trace rows whose
//! `policy_class` the policy does not have, or whose hash ids outrun their input.

use crate::report_page::{chromium, headless};
use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fidelity/premium-weighted")
}

/// `routersim replay` of the premium-weighted trace with `args`, into `out`.
fn replay(out: &Path, args: &[&str]) -> assert_cmd::assert::Assert {
    let dir = fixture();
    Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(&dir)
        .args(["replay", "--trace", "dynamo.trace.jsonl", "--out"])
        .arg(out)
        .args(args)
        .assert()
}

fn meta(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["meta"].clone()
}

#[test]
fn a_replay_without_engine_names_the_default_engine_it_ran() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let stdout = replay(&out, &["--policy", "policy.yaml"]).success();
    let stdout = String::from_utf8_lossy(&stdout.get_output().stdout).into_owned();
    let meta = meta(&out);
    assert_eq!(meta["engine"]["num_gpu_blocks"], 16384, "{meta}");
    assert_eq!(meta["engine"]["max_num_batched_tokens"], 8192);
    assert_eq!(meta["engine"]["timing_model"]["type"], "polynomial");
    assert_eq!(meta["router"]["overlap_score_credit"], 1.0);
    assert_eq!(meta["router"]["router_queue_policy"], "fcfs");
    let engine_line = stdout.lines().find(|l| l.starts_with("engine: {"));
    let engine_line = engine_line.unwrap_or_else(|| panic!("no engine line in {stdout}"));
    assert!(
        engine_line.contains("\"num_gpu_blocks\":16384"),
        "{engine_line}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("router: {")),
        "{stdout}"
    );
}

#[test]
fn the_report_page_shows_the_engine_and_router_settings() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    replay(&out, &["--policy", "policy.yaml", "--quiet"]).success();
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    let script = "<script>addEventListener('load',function(){var p=document.createElement('pre');\
p.id='seen';p.textContent=document.body.innerText;document.body.appendChild(p);});</script>";
    let checked = out.join("checked.html");
    std::fs::write(
        &checked,
        page.replacen("</body>", &format!("{script}</body>"), 1),
    )
    .unwrap();
    let flags = [
        "--window-size=1280,4000",
        "--virtual-time-budget=5000",
        "--dump-dom",
    ];
    let (dom, _) = headless(browser, &tmp.path().join("profile"), &flags, &checked);
    let start = dom.find("<pre id=\"seen\">").expect("the script ran");
    let seen = dom[start..].replace("&quot;", "\"");
    assert!(
        seen.contains("\"num_gpu_blocks\":16384"),
        "the engine is not on the page"
    );
    assert!(
        seen.contains("\"overlap_score_credit\":1.0"),
        "the router is not on the page"
    );
}

#[test]
fn rows_naming_a_class_the_policy_lacks_are_counted_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // Without a policy, every row's class (premium, regular) is unknown.
    let assert = replay(&out, &[]).success();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
    assert!(
        stderr.contains("640 row(s) name a policy_class the policy does not have (the first: row 0, \"premium\")"),
        "{stderr}"
    );
    assert!(stderr.contains("--strict-classes"), "{stderr}");
    let unknown = &meta(&out)["unknown_policy_classes"];
    assert_eq!(unknown["rows"], 640);
    assert_eq!(unknown["first"]["policy_class"], "premium");
    // With the policy every row's class is known.
    let known = tmp.path().join("known");
    let assert = replay(&known, &["--policy", "policy.yaml"]).success();
    assert!(assert.get_output().stderr.is_empty());
    assert_eq!(meta(&known)["unknown_policy_classes"]["rows"], 0);
}

#[test]
fn strict_classes_refuses_unknown_classes_before_writing_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let assert = replay(&out, &["--strict-classes"]).code(2);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
    assert!(stderr.contains("refused by --strict-classes"), "{stderr}");
    assert!(!out.exists(), "nothing is written");
}

/// A trace whose rows 1 and 3 have hash ids past their input (row 2 fills its last block).
const SURPLUS_TRACE: &str = concat!(
    "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 2, \"hash_ids\": [1, 2]}\n",
    "{\"timestamp\": 1, \"input_length\": 513, \"output_length\": 2, \"hash_ids\": [1, 2]}\n",
    "{\"timestamp\": 2, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [1, 3]}\n",
);

#[test]
fn hash_ids_past_the_input_are_counted_and_warned_about_and_still_served() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("t.jsonl"), SURPLUS_TRACE).unwrap();
    let run = |out: &str, extra: &[&str]| {
        Command::cargo_bin("routersim")
            .unwrap()
            .current_dir(tmp.path())
            .args(["replay", "--trace", "t.jsonl", "--no-report", "--out", out])
            .args(extra)
            .assert()
            .success()
    };
    let stderr = String::from_utf8_lossy(&run("out", &[]).get_output().stderr).into_owned();
    assert!(
        stderr.contains(
            "t.jsonl: 2 rows (the first at line 1) have more hash_ids than their input_length fills"
        ),
        "{stderr}"
    );
    let found = meta(&tmp.path().join("out"));
    assert_eq!(
        found["surplus_hash_ids"],
        serde_json::json!({"rows": 2, "first_line": 1})
    );
    let requests = std::fs::read_to_string(tmp.path().join("out/requests.csv")).unwrap();
    assert_eq!(
        requests
            .lines()
            .filter(|l| l.contains(",completed"))
            .count(),
        3
    );
    let quiet = run("quiet", &["--quiet"]);
    assert!(quiet.get_output().stderr.is_empty());
    // A clean trace says none, with the same keys.
    std::fs::write(
        tmp.path().join("t.jsonl"),
        SURPLUS_TRACE.lines().nth(1).unwrap(),
    )
    .unwrap();
    let clean = run("clean", &[]);
    assert!(clean.get_output().stderr.is_empty());
    let none = meta(&tmp.path().join("clean"));
    assert_eq!(
        none["surplus_hash_ids"],
        serde_json::json!({"rows": 0, "first_line": null})
    );
}

#[test]
fn a_scenario_over_a_trace_with_hash_ids_past_the_input_warns_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("t.jsonl"), SURPLUS_TRACE).unwrap();
    let scenario = "name: surplus\nworkers: {count: 1}\nworkload: {trace: t.jsonl}\n";
    std::fs::write(tmp.path().join("s.yaml"), scenario).unwrap();
    for command in ["run", "validate"] {
        let assert = Command::cargo_bin("routersim")
            .unwrap()
            .current_dir(tmp.path())
            .args([command, "s.yaml"])
            .assert()
            .success();
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert!(
            stderr.contains("2 rows (the first at line 1) have more hash_ids"),
            "{command}: {stderr}"
        );
    }
}
