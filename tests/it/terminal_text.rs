//! What reaches the terminal and the file system from user text: control and direction
//! characters in names are escaped when printed, and refused in names that become paths.

use crate::support::run_in_dir;
use std::fs;

const ESCAPES_IN_AN_EXPECTATION: &str = r#"name: esc
workers: {count: 1}
workload:
  groups:
    - {name: a, count: 3, input_tokens: 64, output_tokens: 2}
expect:
  - {name: "gold \e]0;retitled\a \e[2J", stable: true}
"#;

fn has_terminal_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

#[test]
fn check_prints_an_expectation_names_control_characters_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), ESCAPES_IN_AN_EXPECTATION).unwrap();
    let (code, stdout, stderr) = run_in_dir(tmp.path(), &["check", "s.yaml"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(!has_terminal_controls(&stdout), "{stdout:?}");
    assert!(
        stdout.contains(r"gold \u{1b}]0;retitled\u{7} \u{1b}[2J"),
        "{stdout}"
    );
}

#[test]
fn an_error_quoting_user_text_prints_its_control_characters_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = r#"name: esc
workers: {count: 1}
workload:
  groups:
    - {name: a, class: "nope\e[2J\0", count: 3, input_tokens: 64, output_tokens: 2}
"#;
    fs::write(tmp.path().join("s.yaml"), scenario).unwrap();
    let (code, _, stderr) = run_in_dir(tmp.path(), &["run", "s.yaml", "--quiet"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(!has_terminal_controls(&stderr), "{stderr:?}");
    assert!(stderr.contains(r"nope\u{1b}[2J\u{0}"), "{stderr}");
}

#[test]
fn a_scenario_name_that_would_show_as_another_is_refused() {
    for (name, shown) in [
        (r"report\u202Elmth.yaml", r"\u{202e}"),
        (r"gold\u200B", r"\u{200b}"),
        (r"\uFEFFgold", r"\u{feff}"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let scenario = format!(
            "name: \"{name}\"\nworkers: {{count: 1}}\nworkload:\n  groups:\n    - {{name: a, count: 1, input_tokens: 64, output_tokens: 2}}\n"
        );
        fs::write(tmp.path().join("s.yaml"), scenario).unwrap();
        let (code, _, stderr) = run_in_dir(tmp.path(), &["run", "s.yaml", "--quiet"]);
        assert_eq!(code, 2, "{name}: {stderr}");
        assert!(
            stderr.contains("name") && stderr.contains(shown),
            "{stderr}"
        );
        assert!(!tmp.path().join("results").exists(), "{name}");
    }
}

#[test]
fn an_output_folder_that_cannot_be_created_is_refused_before_the_trace_is_read() {
    // procfs takes no new entries, even from root.
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let good = r#"{"timestamp": 0, "input_length": 64, "output_length": 2, "hash_ids": [1]}"#;
    fs::write(tmp.path().join("t.jsonl"), format!("{good}\nnot json\n")).unwrap();
    let out = "/proc/routersim-no-such-folder/out";
    let (code, _, stderr) = run_in_dir(tmp.path(), &["replay", "--trace", "t.jsonl", "--out", out]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("refusing") && stderr.contains(out),
        "{stderr}"
    );
    assert!(
        !stderr.contains("t.jsonl"),
        "the trace was read first: {stderr}"
    );
}
