//! The `report.html` of a run (`run`, `replay`): what ran, the per-class
//! table, the expectations' verdicts, the stability verdict, a scaled run's fleet, every plot
//! inline and links to the files beside it. Bytes from data, like every other exporter here.

use super::fleet_plots::FLEET_CHARTS;
use super::html::{self, Page};
use super::table;
use crate::report::measure::fleet::FleetFigures;
use crate::report::measure::metrics::RunMetrics;
use crate::report::verdict::evaluate::ExpectationOutcome;

/// What the page says about a run besides its metrics.
pub struct RunPage<'a> {
    /// The command that made the run (`run`, `replay`): the page's title starts with it.
    pub command: &'a str,
    /// The scenario's name (a replay: its trace).
    pub title: &'a str,
    /// What ran, in order: command, seed, scenario file, overrides, ...
    pub facts: Vec<(String, String)>,
    /// The scenario's verdicts; `None` for a run without a scenario (a replay), which has
    /// none to judge.
    pub outcomes: Option<&'a [ExpectationOutcome]>,
}

/// `report.html` of a run whose output directory holds `files` (the plots' SVGs among them
/// are drawn inline; every file is linked).
pub fn run_report<S: AsRef<str>, B: AsRef<[u8]>>(
    page: &RunPage,
    metrics: &RunMetrics,
    files: &[(S, B)],
) -> Vec<u8> {
    let mut out = Page::new(page.command, page.title);
    out.facts(&page.facts);
    setup_section(&mut out, metrics);
    classes_section(&mut out, metrics);
    if let Some(outcomes) = page.outcomes {
        expectations_section(&mut out, outcomes);
    }
    stability_section(&mut out, metrics);
    if metrics.fleet.events.is_some() {
        fleet_section(&mut out, metrics, files);
    }
    out.section("plots", "Plots");
    let is_fleet_chart = |name: &str| {
        FLEET_CHARTS
            .iter()
            .any(|stem| name == format!("{stem}.svg"))
    };
    let plots: Vec<(&str, &[u8])> = (files.iter())
        .map(|(n, b)| (n.as_ref(), b.as_ref()))
        .filter(|(n, _)| !is_fleet_chart(n))
        .collect();
    match plots.iter().any(|(n, _)| n.ends_with(".svg")) {
        true => out.charts(&plots),
        false => {
            out.paragraph("No plots were drawn for this run (`replay` draws them with --plots).")
        }
    }
    out.section("files", "Files");
    out.links(&html::linked_names(files));
    out.finish()
}

/// The worker pools and the policy classes with their quanta.
fn setup_section(out: &mut Page, metrics: &RunMetrics) {
    out.section("setup", "What ran");
    let header = ["pool", "role", "workers", "dp ranks per worker"].map(String::from);
    let rows: Vec<Vec<String>> = metrics
        .pools
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.role.label().to_string(),
                p.workers.to_string(),
                p.dp_size.to_string(),
            ]
        })
        .collect();
    out.table("pools", &header, &rows);
    let header = ["policy class", "quantum (tokens)", "ideal share"].map(String::from);
    let rows: Vec<Vec<String>> = metrics
        .classes
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.quantum_tokens.to_string(),
                format!("{:.3}", c.ideal_share),
            ]
        })
        .collect();
    out.table("policy", &header, &rows);
}

/// The terminal's tables: per class, per pool (several pools) and per session class.
fn classes_section(out: &mut Page, metrics: &RunMetrics) {
    out.section("classes", "Per class");
    let classes = table::class_cells(metrics);
    out.table("classes", &classes.header, &classes.rows);
    for (id, cells) in table::pool_cells(metrics) {
        out.table(id, &cells.header, &cells.rows);
    }
    if let Some(note) = table::pool_note(metrics) {
        out.paragraph(&note);
    }
    if let Some(cells) = table::session_cells(metrics) {
        out.table("session-table", &cells.header, &cells.rows);
    }
    out.paragraph(&table::totals_line(metrics));
    out.paragraph("The same figures as classes.csv and summary.json, which hold more columns.");
}

fn expectations_section(out: &mut Page, outcomes: &[ExpectationOutcome]) {
    out.section("expectations", "Expectations");
    if outcomes.is_empty() {
        out.paragraph("The scenario states no expectations.");
        return;
    }
    let passed = outcomes.iter().filter(|o| o.passed).count();
    out.paragraph(&format!("{passed} of {} pass.", outcomes.len()));
    out.verdicts("verdicts", outcomes);
}

/// A scaled run's fleet: what it cost per role, its scaling events, and its workers per role
/// over time beside each class's latency over time.
fn fleet_section<S: AsRef<str>, B: AsRef<[u8]>>(
    out: &mut Page,
    metrics: &RunMetrics,
    files: &[(S, B)],
) {
    out.section("fleet", "Fleet");
    let fleet = &metrics.fleet;
    let header = ["role", "GPU-hours", "peak workers", "mean workers"].map(String::from);
    let row = |role: &str, f: &FleetFigures| {
        let gpu_hours = format!("{:.4}", f.gpu_hours);
        let mean = format!("{:.2}", f.mean_workers);
        vec![
            role.to_string(),
            gpu_hours,
            f.peak_workers.to_string(),
            mean,
        ]
    };
    let mut rows: Vec<Vec<String>> = (fleet.roles.iter())
        .map(|(role, f)| row(role.label(), f))
        .collect();
    rows.push(row("all", &fleet.all));
    out.table("fleet-table", &header, &rows);
    let events = fleet.events.as_ref().map_or(0, Vec::len);
    out.paragraph(&format!(
        "The scaling policy changed a role's target {} (scaling.csv). Billed: from when a \
         worker is asked for until it has left, start-up and drain included.",
        crate::text::count_of(events, "time")
    ));
    out.charts_row(files, &FLEET_CHARTS);
}

fn stability_section(out: &mut Page, metrics: &RunMetrics) {
    out.section("stability", "Stability");
    let stability = &metrics.stability;
    // A reason already starts with the verdict it explains ("too short to judge: ...").
    let text = match &stability.reason {
        Some(reason) => format!("Stability: {reason}"),
        None => format!("Stability: {}", stability.verdict()),
    };
    out.mono("stability-verdict", &text);
    if let Some(warning) = stability.warning() {
        out.mono("stability-warning", &warning);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{done, result_of};
    use crate::report::verdict::evaluate::ExpectationOutcome;
    use crate::report::verdict::expect::Bound;
    use crate::scheduling::scheduler::DispatchPath;

    fn outcome(label: &str, passed: bool) -> ExpectationOutcome {
        ExpectationOutcome {
            label: label.to_string(),
            measured: Some(3.0),
            bound: Bound::AtMost(2.0),
            passed,
            reason: None,
            seed: 0,
            wall_time_s: 0.0,
            boolean: false,
        }
    }

    fn page_of(class_names: &[&str], outcomes: &[ExpectationOutcome]) -> String {
        let records = (0..4)
            .map(|row| {
                done(
                    row,
                    row as usize % 2,
                    DispatchPath::Queued,
                    [0, row + 1, row + 2],
                )
            })
            .collect();
        let result = result_of(class_names, records);
        let metrics = RunMetrics::compute(&result, &[2, 1]);
        let plots = crate::report::render::plots::render_all(&result, &metrics, &[]).unwrap();
        let page = RunPage {
            command: "run",
            title: "demo <run>",
            facts: vec![("command".into(), "run".into())],
            outcomes: Some(outcomes),
        };
        String::from_utf8(run_report(&page, &metrics, &plots)).unwrap()
    }

    #[test]
    fn every_user_string_on_the_page_is_escaped() {
        let hostile = "<b>&\"x\"";
        let html = page_of(&[hostile, "plain"], &[outcome(hostile, false)]);
        assert!(!html.contains("<b>"), "an unescaped class name");
        assert!(html.contains("&lt;b&gt;&amp;&quot;x&quot;"), "{html}");
        assert!(html.contains("<h1>demo &lt;run&gt;</h1>"));
        assert!(html.contains("<title>routersim run: demo &lt;run&gt;</title>"));
    }

    #[test]
    fn verdicts_read_pass_and_fail_with_value_and_bound() {
        let html = page_of(
            &["gold", "standard"],
            &[outcome("a", true), outcome("b", false)],
        );
        assert!(html.contains("<td class=\"verdict pass\">PASS</td><td class=\"text\">a</td><td>3</td><td>at most 2</td>"), "{html}");
        assert!(html.contains("<td class=\"verdict fail\">FAIL</td><td class=\"text\">b</td>"));
        assert!(html.contains("1 of 2 pass."));
    }

    #[test]
    fn the_page_holds_the_class_table_every_plot_and_links() {
        let html = page_of(&["gold", "standard"], &[]);
        assert!(html.contains("<table id=\"classes\">"));
        assert!(
            html.contains("<td>gold</td><td>2</td>"),
            "the class row with its quantum"
        );
        for chart in ["completions_by_index", "ttft_cdf", "e2e_cdf", "in_system"] {
            assert!(html.contains(&format!("id=\"chart-{chart}\"")), "{chart}");
            assert!(
                html.contains(&format!("<li><a href=\"{chart}.png\">")),
                "{chart}"
            );
        }
        assert!(html.contains("The scenario states no expectations."));
    }

    #[test]
    fn the_same_run_gives_the_same_bytes() {
        assert_eq!(
            page_of(&["gold", "standard"], &[]),
            page_of(&["gold", "standard"], &[])
        );
    }
}
