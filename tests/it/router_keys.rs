//! `replay`'s `--router` and `--engine` keys: each is honoured, accepted as a no-op as in Dynamo
//! 1.6.1's offline replay, or refused by name (exit 2); none is dropped without a word.

use crate::support::run_in_dir;
use std::fs;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fidelity")
        .join(name)
}

/// Replays `fixture`'s trace and engine (unless `extra` gives one) on two workers with `extra`
/// flags, run in `cwd`:
/// (exit code, stderr, requests.csv; empty when the replay failed).
fn replay(fixture_name: &str, cwd: &Path, extra: &[&str]) -> (i32, String, String) {
    let dir = fixture(fixture_name);
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("out");
    let (trace, engine) = (dir.join("dynamo.trace.jsonl"), dir.join("engine.json"));
    let mut args = vec![
        "replay",
        "--workers",
        "2",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    args.extend(["--trace", trace.to_str().unwrap()]);
    if !extra.contains(&"--engine") {
        args.extend(["--engine", engine.to_str().unwrap()]);
    }
    args.extend(extra);
    let (code, _, stderr) = run_in_dir(cwd, &args);
    let rows = fs::read_to_string(out_dir.join("requests.csv")).unwrap_or_default();
    (code, stderr, rows)
}

#[test]
fn use_kv_events_false_changes_nothing_as_in_dynamo() {
    let here = fixture("prefix-sharing");
    let (code, _, default) = replay("prefix-sharing", &here, &[]);
    assert_eq!(code, 0);
    let off = replay(
        "prefix-sharing",
        &here,
        &["--router", r#"{"use_kv_events": false}"#],
    );
    assert_eq!(off.0, 0, "{}", off.1);
    assert!(
        off.1.contains("use_kv_events"),
        "a note names it: {}",
        off.1
    );
    assert!(default == off.2, "use_kv_events: false changed the rows");
}

#[test]
fn a_no_op_router_key_is_accepted_with_a_note() {
    let here = fixture("prefix-sharing");
    let (_, _, default) = replay("prefix-sharing", &here, &[]);
    let outputs = r#"{"router_track_output_blocks": true}"#;
    let (code, stderr, rows) = replay("prefix-sharing", &here, &["--router", outputs]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("router_track_output_blocks"), "{stderr}");
    assert!(rows == default, "1.6.1's replay never reads it");
    let (code, stderr, rows) = replay(
        "prefix-sharing",
        &here,
        &["--router", r#"{"router_ttl_secs": 5}"#],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("router_ttl_secs") && stderr.contains("no effect"),
        "{stderr}"
    );
    assert!(rows == default);
}

#[test]
fn a_router_key_routersim_cannot_honour_is_refused_by_name() {
    let here = fixture("prefix-sharing");
    for (router, key) in [
        (
            r#"{"router_prefill_load_model": "ais"}"#,
            "router_prefill_load_model",
        ),
        (
            r#"{"router_prefill_policy": "thunder"}"#,
            "router_prefill_policy",
        ),
        (
            r#"{"router_approximate_cache_policy": "lru"}"#,
            "router_approximate_cache_policy",
        ),
    ] {
        let (code, stderr, _) = replay("prefix-sharing", &here, &["--router", router]);
        assert_eq!(code, 2, "{router}: {stderr}");
        assert!(stderr.contains(key), "{router}: {stderr}");
    }
}

#[test]
fn an_engine_key_routersim_cannot_honour_is_refused_by_name() {
    let here = fixture("prefix-sharing");
    let tmp = tempfile::tempdir().unwrap();
    let engine = tmp.path().join("engine.json");
    fs::write(&engine, r#"{"engine": {"max_num_seqs": null}}"#).unwrap();
    let (code, stderr, _) = replay(
        "prefix-sharing",
        &here,
        &["--engine", engine.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("engine.json") && stderr.contains("max_num_seqs"),
        "{stderr}"
    );
}

#[test]
fn policy_flag_and_router_policy_config_together_are_a_usage_error() {
    let here = fixture("premium-weighted");
    let router = r#"{"router_policy_config": "policy.yaml"}"#;
    let (code, stderr, _) = replay(
        "premium-weighted",
        &here,
        &["--policy", "policy.yaml", "--router", router],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--policy") && stderr.contains("router_policy_config"),
        "{stderr}"
    );
}

#[test]
fn router_policy_config_is_a_path_from_the_current_directory() {
    let elsewhere = tempfile::tempdir().unwrap();
    let router = r#"{"router_policy_config": "policy.yaml"}"#;
    let (code, stderr, _) = replay("premium-weighted", elsewhere.path(), &["--router", router]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("policy.yaml"), "{stderr}");
}

/// 1.6.1 applies a policy file's root `router:` settings over the router's keyword arguments.
#[test]
fn a_policy_files_router_settings_replace_the_router_flags() {
    let here = fixture("prefix-sharing");
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("settings.yaml");
    fs::write(&policy, "router:\n  router_track_active_blocks: false\n").unwrap();
    let policy = policy.to_str().unwrap();
    let (_, _, default) = replay("prefix-sharing", &here, &[]);
    let off = r#"{"router_track_active_blocks": false}"#;
    let (_, _, flag_off) = replay("prefix-sharing", &here, &["--router", off]);
    assert!(flag_off != default, "the setting must matter on this trace");
    let on = r#"{"router_track_active_blocks": true}"#;
    let (code, stderr, from_file) = replay(
        "prefix-sharing",
        &here,
        &["--policy", policy, "--router", on],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        from_file == flag_off,
        "the file's setting wins over --router"
    );
}

#[test]
fn a_policy_files_router_map_refuses_keys_dynamo_refuses_there() {
    let here = fixture("prefix-sharing");
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("settings.yaml");
    fs::write(&policy, "router:\n  router_temperature: 0.5\n").unwrap();
    let (code, stderr, _) = replay(
        "prefix-sharing",
        &here,
        &["--policy", policy.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("settings.yaml") && stderr.contains("router_temperature"),
        "{stderr}"
    );
}
