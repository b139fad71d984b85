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
