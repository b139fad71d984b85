//! JUnit XML for `check --junit FILE`: one testsuite per scenario, one testcase per
//! expectation, so CI systems display each expectation's verdict, measured value and bound.
//!
//! A pure exporter: the bytes depend only on the outcomes given. Each outcome carries the wall
//! time of the run(s) behind it, which becomes the testcase's `time` (what JUnit consumers
//! expect), so two `check` runs differ in `time` attributes and nowhere else.
//!
//! ```xml
//! <testcase name="W premium in first 320" classname="premium-vs-regular-weighted" time="0.412">
//!   <properties>
//!     <property name="value" value="255"/>
//!     <property name="bound" value="at least 240"/>
//!     <property name="seed" value="0"/>
//!   </properties>
//!   <system-out>PASS  W premium in first 320 = 255  (at least 240) on seed 0</system-out>
//! </testcase>
//! ```
//!
//! A failure adds `<failure message="FAIL  ... on seed N" type="expectation">` before
//! `system-out`. Every testcase of a scenario shares its run, so each carries the run's whole
//! time, and the testsuite's `time` is that run's time (not the sum of its testcases).

use crate::report::verdict::evaluate::{ExpectationOutcome, format_outcome};

/// The expectations of one scenario and their verdicts.
#[derive(Clone, Debug, PartialEq)]
pub struct JunitSuite {
    /// The scenario's name (or file), shown as the testsuite name.
    pub name: String,
    pub outcomes: Vec<ExpectationOutcome>,
    /// The `--set PATH=VALUE` overrides the scenario ran with, in order: the testsuite's
    /// `<property name="set">` entries, so a CI report says what was judged.
    pub overrides: Vec<String>,
    /// The seed of each replication, in order (one for a single-seed check): a testcase
    /// whose seed is one of several says which replication it came from, since a derived
    /// seed is a 20-digit number no one typed.
    pub replication_seeds: Vec<u64>,
}

/// The JUnit XML document for `suites`, in the given order.
pub fn junit_xml(suites: &[JunitSuite]) -> Vec<u8> {
    let tests: usize = suites.iter().map(|s| s.outcomes.len()).sum();
    let failures: usize = suites.iter().map(failure_count).sum();
    let time_s: f64 = suites.iter().map(suite_time_s).sum();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml += &format!(
        "<testsuites name=\"routersim check\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{}\">\n",
        seconds(time_s)
    );
    for suite in suites {
        write_suite(&mut xml, suite);
    }
    xml += "</testsuites>\n";
    xml.into_bytes()
}

fn failure_count(suite: &JunitSuite) -> usize {
    suite.outcomes.iter().filter(|o| !o.passed).count()
}

/// The suite's run time: its testcases share one run (or one set of seeds), so the longest.
fn suite_time_s(suite: &JunitSuite) -> f64 {
    suite
        .outcomes
        .iter()
        .map(|o| o.wall_time_s)
        .fold(0.0, f64::max)
}

/// Seconds as JUnit writes them, to the millisecond.
fn seconds(s: f64) -> String {
    format!("{s:.3}")
}

fn write_suite(xml: &mut String, suite: &JunitSuite) {
    let name = escape(&suite.name);
    *xml += &format!(
        "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{}\">\n",
        suite.outcomes.len(),
        failure_count(suite),
        seconds(suite_time_s(suite))
    );
    if !suite.overrides.is_empty() {
        *xml += "    <properties>\n";
        for set in &suite.overrides {
            let set = escape(set);
            *xml += &format!("      <property name=\"set\" value=\"{set}\"/>\n");
        }
        *xml += "    </properties>\n";
    }
    for outcome in &suite.outcomes {
        let replication = match suite.replication_seeds.len() {
            0 | 1 => None,
            _ => (suite.replication_seeds.iter()).position(|&s| s == outcome.seed),
        };
        write_case(xml, &name, outcome, replication);
    }
    *xml += "  </testsuite>\n";
}

fn write_case(
    xml: &mut String,
    suite_name: &str,
    outcome: &ExpectationOutcome,
    replication: Option<usize>,
) {
    let case = escape(&outcome.label);
    let time = seconds(outcome.wall_time_s);
    *xml += &format!("    <testcase name=\"{case}\" classname=\"{suite_name}\" time=\"{time}\">\n");
    write_properties(xml, outcome, replication);
    let verdict = escape(&format!(
        "{} on seed {}",
        format_outcome(outcome),
        outcome.seed
    ));
    if !outcome.passed {
        *xml += &format!(
            "      <failure message=\"{verdict}\" type=\"expectation\">{verdict}</failure>\n"
        );
    }
    *xml += &format!("      <system-out>{verdict}</system-out>\n");
    *xml += "    </testcase>\n";
}

/// The measured value (`n/a` when unmeasurable, `yes`/`no` for a yes-or-no figure), the
/// bound, the seed and (of several) the replication, for CI dashboards.
fn write_properties(xml: &mut String, outcome: &ExpectationOutcome, replication: Option<usize>) {
    let mut properties = vec![
        ("value", outcome.value_text()),
        ("bound", outcome.bound_text()),
        ("seed", outcome.seed.to_string()),
    ];
    if let Some(r) = replication {
        properties.push(("replication", r.to_string()));
    }
    *xml += "      <properties>\n";
    for (name, value) in properties {
        *xml += &format!(
            "        <property name=\"{name}\" value=\"{}\"/>\n",
            escape(&value)
        );
    }
    *xml += "      </properties>\n";
}

/// Escapes text for XML attributes and content; characters XML 1.0 cannot carry at all
/// (control characters other than tab, newline, carriage return) become U+FFFD.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out += "&amp;",
            '<' => out += "&lt;",
            '>' => out += "&gt;",
            '"' => out += "&quot;",
            '\'' => out += "&apos;",
            '\t' | '\n' | '\r' => out += &format!("&#{};", ch as u32),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::verdict::expect::Bound;

    fn outcome(label: &str, passed: bool, seed: u64) -> ExpectationOutcome {
        ExpectationOutcome {
            label: label.to_string(),
            measured: Some(255.0),
            bound: Bound::AtLeast(300.0),
            passed,
            reason: None,
            seed,
            wall_time_s: 1.25,
            boolean: false,
        }
    }

    fn suites() -> Vec<JunitSuite> {
        let mut unmeasured = outcome("regular keeps up", false, 0);
        unmeasured.measured = None;
        unmeasured.reason = Some("too few".into());
        unmeasured.wall_time_s = 0.0004;
        vec![
            JunitSuite {
                name: "premium <weighted> & \"friends\"".into(),
                outcomes: vec![
                    outcome("premium among first 320", true, 0),
                    outcome("it's <bad> & \"worse\"\u{1}", false, 17),
                ],
                overrides: vec![],
                replication_seeds: vec![],
            },
            JunitSuite {
                name: "empty".into(),
                outcomes: vec![],
                overrides: vec![],
                replication_seeds: vec![],
            },
            JunitSuite {
                name: "unmeasured".into(),
                outcomes: vec![unmeasured],
                overrides: vec![],
                replication_seeds: vec![],
            },
        ]
    }

    #[test]
    fn a_suite_records_the_overrides_it_ran_with() {
        let suite = JunitSuite {
            name: "s".into(),
            outcomes: vec![outcome("premium among first 320", true, 0)],
            overrides: vec!["workers.count=8".into(), "router.x=\"<a>\"".into()],
            replication_seeds: vec![0],
        };
        let text = String::from_utf8(junit_xml(&[suite])).unwrap();
        let doc = parsed(&text);
        let testsuite = elements(doc.root_element())[0];
        assert_eq!(
            properties(testsuite),
            vec![
                ("set".to_string(), "workers.count=8".to_string()),
                ("set".to_string(), "router.x=\"<a>\"".to_string()),
            ]
        );
    }

    #[test]
    fn a_case_of_several_seeds_names_its_replication_and_a_yes_or_no_figure_says_yes() {
        let derived_seed = 12_345_678_901_234_567_890;
        let mut stable = outcome("keeps up with the load", true, derived_seed);
        (stable.boolean, stable.measured) = (true, Some(1.0));
        let suite = JunitSuite {
            name: "s".into(),
            outcomes: vec![outcome("premium among first 320", true, 7), stable],
            overrides: vec![],
            replication_seeds: vec![7, 99, derived_seed],
        };
        let text = String::from_utf8(junit_xml(&[suite])).unwrap();
        let doc = parsed(&text);
        let cases = elements(elements(doc.root_element())[0]);
        let property = |case, name: &str| {
            let found = properties(case).into_iter().find(|(n, _)| n == name);
            found.map(|(_, v)| v)
        };
        assert_eq!(property(cases[0], "replication").as_deref(), Some("0"));
        assert_eq!(property(cases[1], "replication").as_deref(), Some("2"));
        assert_eq!(property(cases[1], "value").as_deref(), Some("yes"));
        assert_eq!(property(cases[1], "bound").as_deref(), Some("yes"));
        assert_eq!(
            property(cases[1], "seed").as_deref(),
            Some("12345678901234567890")
        );
    }

    fn parsed(text: &str) -> roxmltree::Document<'_> {
        roxmltree::Document::parse(text).expect("well-formed XML")
    }

    fn elements<'a, 'i>(node: roxmltree::Node<'a, 'i>) -> Vec<roxmltree::Node<'a, 'i>> {
        node.children().filter(|n| n.is_element()).collect()
    }

    /// `(name, value)` of each `<property>` of a testcase (or a testsuite).
    fn properties(case: roxmltree::Node) -> Vec<(String, String)> {
        let block = elements(case)
            .into_iter()
            .find(|n| n.has_tag_name("properties"))
            .expect("a properties block");
        elements(block)
            .into_iter()
            .map(|p| {
                let get = |a| p.attribute(a).unwrap_or_default().to_string();
                (get("name"), get("value"))
            })
            .collect()
    }

    #[test]
    fn junit_is_well_formed_and_round_trips_escaped_text() {
        let text = String::from_utf8(junit_xml(&suites())).unwrap();
        let doc = parsed(&text);
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        assert_eq!(root.attribute("tests"), Some("3"));
        assert_eq!(root.attribute("failures"), Some("2"));
        let suites = elements(root);
        assert_eq!(suites.len(), 3);
        assert_eq!(
            suites[0].attribute("name"),
            Some("premium <weighted> & \"friends\"")
        );
        let cases = elements(suites[0]);
        assert_eq!(cases.len(), 2);
        assert!(
            elements(cases[0])
                .iter()
                .all(|n| !n.has_tag_name("failure")),
            "a pass has no failure"
        );
        let failure = elements(cases[1])
            .into_iter()
            .find(|n| n.has_tag_name("failure"))
            .unwrap();
        let message = "FAIL  it's <bad> & \"worse\"\u{FFFD} = 255  (at least 300) on seed 17";
        assert_eq!(failure.attribute("message"), Some(message));
        assert_eq!(failure.text(), Some(message));
    }

    #[test]
    fn every_case_carries_value_bound_seed_and_time() {
        let text = String::from_utf8(junit_xml(&suites())).unwrap();
        let doc = parsed(&text);
        let suites = elements(doc.root_element());
        let pass = elements(suites[0])[0];
        assert_eq!(pass.attribute("time"), Some("1.250"));
        let expected = [("value", "255"), ("bound", "at least 300"), ("seed", "0")];
        let expected: Vec<_> = expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(properties(pass), expected);
        let out = elements(pass)
            .into_iter()
            .find(|n| n.has_tag_name("system-out"))
            .unwrap();
        assert_eq!(
            out.text(),
            Some("PASS  premium among first 320 = 255  (at least 300) on seed 0")
        );
        let unmeasured = elements(suites[2])[0];
        assert_eq!(properties(unmeasured)[0], ("value".into(), "n/a".into()));
        assert_eq!(unmeasured.attribute("time"), Some("0.000"));
    }

    #[test]
    fn suites_take_their_runs_time_and_the_document_their_sum() {
        let text = String::from_utf8(junit_xml(&suites())).unwrap();
        let doc = parsed(&text);
        let root = doc.root_element();
        let times: Vec<_> = elements(root)
            .iter()
            .map(|s| s.attribute("time").unwrap())
            .collect();
        assert_eq!(times, ["1.250", "0.000", "0.000"]);
        assert_eq!(root.attribute("time"), Some("1.250"));
    }

    #[test]
    fn junit_is_deterministic() {
        assert_eq!(junit_xml(&suites()), junit_xml(&suites()));
    }

    #[test]
    fn escaping_keeps_line_breaks_in_attributes() {
        assert_eq!(escape("a\nb\t<c>"), "a&#10;b&#9;&lt;c&gt;");
    }
}
