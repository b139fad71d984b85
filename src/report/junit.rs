//! JUnit XML for `check --junit FILE`: one testsuite per scenario, one testcase per
//! expectation, so CI systems display each expectation's verdict.
//!
//! A pure exporter: no timestamps or durations (they would make the bytes differ per run).

use super::evaluate::{ExpectationOutcome, format_outcome};

/// The expectations of one scenario and their verdicts.
#[derive(Clone, Debug, PartialEq)]
pub struct JunitSuite {
    /// The scenario's name (or file), shown as the testsuite name.
    pub name: String,
    pub outcomes: Vec<ExpectationOutcome>,
}

/// The JUnit XML document for `suites`, in the given order.
pub fn junit_xml(suites: &[JunitSuite]) -> Vec<u8> {
    let tests: usize = suites.iter().map(|s| s.outcomes.len()).sum();
    let failures: usize = suites.iter().map(failure_count).sum();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml += &format!(
        "<testsuites name=\"routersim check\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\">\n"
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

fn write_suite(xml: &mut String, suite: &JunitSuite) {
    let name = escape(&suite.name);
    *xml += &format!(
        "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\">\n",
        suite.outcomes.len(),
        failure_count(suite)
    );
    for outcome in &suite.outcomes {
        let case = escape(&outcome.label);
        if outcome.passed {
            *xml += &format!("    <testcase name=\"{case}\" classname=\"{name}\"/>\n");
            continue;
        }
        let message = escape(&format_outcome(outcome));
        *xml += &format!("    <testcase name=\"{case}\" classname=\"{name}\">\n");
        *xml += &format!(
            "      <failure message=\"{message}\" type=\"expectation\">{message}</failure>\n"
        );
        *xml += "    </testcase>\n";
    }
    *xml += "  </testsuite>\n";
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

    fn outcome(label: &str, passed: bool) -> ExpectationOutcome {
        ExpectationOutcome {
            label: label.to_string(),
            measured: Some(255.0),
            bound: "at least 300".to_string(),
            passed,
            reason: None,
        }
    }

    fn suites() -> Vec<JunitSuite> {
        vec![
            JunitSuite {
                name: "premium <weighted> & \"friends\"".into(),
                outcomes: vec![
                    outcome("premium among first 320", true),
                    outcome("it's <bad> & \"worse\"\u{1}", false),
                ],
            },
            JunitSuite {
                name: "empty".into(),
                outcomes: vec![],
            },
        ]
    }

    #[test]
    fn junit_is_well_formed_and_round_trips_escaped_text() {
        let bytes = junit_xml(&suites());
        let text = String::from_utf8(bytes).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        assert_eq!(root.attribute("tests"), Some("2"));
        assert_eq!(root.attribute("failures"), Some("1"));
        let suites: Vec<_> = root.children().filter(|n| n.is_element()).collect();
        assert_eq!(suites.len(), 2);
        assert_eq!(
            suites[0].attribute("name"),
            Some("premium <weighted> & \"friends\"")
        );
        let cases: Vec<_> = suites[0].children().filter(|n| n.is_element()).collect();
        assert_eq!(cases.len(), 2);
        assert!(
            cases[0].children().all(|n| !n.is_element()),
            "a pass has no failure"
        );
        let failure = cases[1].first_element_child().unwrap();
        assert_eq!(failure.tag_name().name(), "failure");
        let message = "FAIL  it's <bad> & \"worse\"\u{FFFD} = 255  (at least 300)";
        assert_eq!(failure.attribute("message"), Some(message));
        assert_eq!(failure.text(), Some(message));
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
