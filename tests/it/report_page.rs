//! `report.html` as a person sees it: written beside every run, plan and sweep output (not
//! with `--no-report`), the same bytes on a rerun, and, rendered in headless Chromium, a
//! non-blank page whose class table and charts are visible, whose verdicts read what `check`
//! says, with no console message and nothing loaded.
//!
//! The browser tests need `/usr/bin/chromium` (Debian package `chromium`; `.ci/run`
//! installs it). Without it they fail, saying so; set `ROUTERSIM_SKIP_BROWSER=1` to skip
//! them on purpose (they then pass without checking the rendering).
//!
//! How the page is measured without a script of its own: the test copies `report.html` into
//! a temporary `checked.html` with two scripts added, one first in `<head>` that records
//! every error event (a failed load fires one), one that on `load` measures the elements
//! (`getBoundingClientRect`, computed style) and writes the results as JSON into a `<pre>`.
//! Chromium's `--dump-dom` prints the document after the load; the test parses that JSON.
//! Console messages come from Chromium's log on stderr (`--enable-logging=stderr`).

use crate::support::run_in_dir;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const SCENARIO: &str = "scenarios/premium-vs-regular-weighted.yaml";
/// Equal quanta: the weighted scenario's share expectations fail, its progress ones pass.
const EQUAL_QUANTA: &str = "router.policy_classes.regular.quantum=512";

fn scenario() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(SCENARIO)
        .display()
        .to_string()
}

/// Runs the weighted scenario with equal quanta into `dir/out` (or with `extra` flags).
fn run_equal_quanta(dir: &Path, extra: &[&str]) -> PathBuf {
    let scenario = scenario();
    let mut args = vec![
        "run",
        &scenario,
        "--quiet",
        "--out",
        "out",
        "--set",
        EQUAL_QUANTA,
    ];
    args.extend(extra);
    let (code, _, stderr) = run_in_dir(dir, &args);
    assert_eq!(code, 0, "{stderr}");
    dir.join("out")
}

#[test]
fn run_plan_and_sweep_outputs_carry_report_html_unless_no_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_equal_quanta(tmp.path(), &[]);
    let page = fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("<h1>premium-vs-regular-weighted</h1>"));
    let scenario = scenario();
    let sweep = [
        "sweep",
        &scenario,
        "--set",
        "router.policy_classes.regular.quantum=128,512",
        "--quiet",
    ];
    let (code, _, stderr) = run_in_dir(tmp.path(), &[&sweep[..], &["--out", "sweep"]].concat());
    assert_eq!(code, 0, "{stderr}");
    let page = fs::read_to_string(tmp.path().join("sweep/report.html")).unwrap();
    assert!(page.contains("<table id=\"summary\">"), "{page}");
    assert!(page.contains("id=\"chart-share_first_n_vs_regular.quantum\""));
    let quiet = run_in_dir(
        tmp.path(),
        &[&sweep[..], &["--no-report", "--out", "bare"]].concat(),
    );
    assert_eq!(quiet.0, 0, "{}", quiet.2);
    assert!(tmp.path().join("bare/sweep.csv").exists());
    assert!(!tmp.path().join("bare/report.html").exists());
}

/// `plan` of the bundled capacity scenario (fewest workers in 3..8) into `dir/plan`, with
/// `extra` flags: its exit code, stdout and stderr.
fn plan_capacity_into_plan(dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let capacity = scenario().replace("premium-vs-regular-weighted", "capacity-two-tenants");
    let args = [
        "plan",
        &capacity,
        "--minimize",
        "workers.count",
        "--range",
        "3..8",
    ];
    run_in_dir(dir, &[&args[..], extra, &["--out", "plan"]].concat())
}

#[test]
fn a_plan_report_shows_the_answer_bracket_binding_expectation_and_probes() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, stderr) = plan_capacity_into_plan(tmp.path(), &["--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    let page = fs::read_to_string(tmp.path().join("plan/report.html")).unwrap();
    for part in [
        "<h2 id=\"section-answer\">",
        "bracket: last infeasible",
        "<table id=\"probes-0\">",
        "id=\"chart-capacity\"",
        "<a href=\"plan.json\">",
    ] {
        assert!(page.contains(part), "{part} missing from {page}");
    }
}

#[test]
fn in_a_browser_a_plans_answer_reads_one_verdict_per_line_as_the_terminal_prints_it() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = plan_capacity_into_plan(tmp.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    let seen =
        crate::out_dirs::visible_text(browser, tmp.path(), &tmp.path().join("plan/report.html"));
    // The page shows the terminal's answer block line for line, not run together.
    let answer_block: Vec<&str> = stdout
        .lines()
        .take_while(|l| !l.contains(" probes x "))
        .collect();
    assert!(answer_block.len() >= 6, "{stdout}");
    assert!(answer_block.contains(&"  at 4 these fail:"), "{stdout}");
    let seen_lines: Vec<&str> = seen.lines().collect();
    let first = seen_lines
        .iter()
        .position(|l| *l == answer_block[0])
        .expect(&seen);
    assert_eq!(
        &seen_lines[first..first + answer_block.len()],
        &answer_block[..],
        "{seen}"
    );
}

#[test]
fn a_rerun_writes_the_same_report_and_no_report_writes_none() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_equal_quanta(tmp.path(), &[]);
    let first = fs::read(out.join("report.html")).unwrap();
    run_equal_quanta(tmp.path(), &[]);
    assert_eq!(first, fs::read(out.join("report.html")).unwrap());
    run_equal_quanta(tmp.path(), &["--no-report"]);
    assert!(
        !out.join("report.html").exists(),
        "a rerun with --no-report removes it"
    );
    assert!(out.join("classes.csv").exists());
}

#[test]
fn the_report_is_the_same_whatever_directory_the_scenario_path_is_spelled_from() {
    let tmp = tempfile::tempdir().unwrap();
    let absolute = run_equal_quanta(tmp.path(), &[]).join("report.html");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tmp.path().join("relative");
    let out_arg = out.display().to_string();
    let args = [
        "run",
        SCENARIO,
        "--quiet",
        "--out",
        &out_arg,
        "--set",
        EQUAL_QUANTA,
    ];
    let (code, _, stderr) = run_in_dir(root, &args);
    assert_eq!(code, 0, "{stderr}");
    let page = fs::read(out.join("report.html")).unwrap();
    assert_eq!(
        fs::read(absolute).unwrap(),
        page,
        "the page names the file, not the path"
    );
}

#[test]
fn a_replay_report_is_the_same_whatever_directory_the_trace_path_is_spelled_from() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fidelity/chunked-long");
    let replay = |dir: &Path, trace: &str, out: &str| {
        let args = [
            "replay",
            "--trace",
            trace,
            "--workers",
            "1",
            "--quiet",
            "--out",
            out,
        ];
        let (code, _, stderr) = run_in_dir(dir, &args);
        assert_eq!(code, 0, "{stderr}");
        fs::read(tmp.path().join(out).join("report.html")).unwrap()
    };
    let absolute_trace = fixture.join("trace.jsonl").display().to_string();
    let from_tmp = replay(tmp.path(), &absolute_trace, "a");
    let out_b = tmp.path().join("b").display().to_string();
    let from_fixture = replay(&fixture, "trace.jsonl", &out_b);
    assert_eq!(
        from_tmp, from_fixture,
        "the page names the trace file, not its path"
    );
    let page = String::from_utf8(from_tmp).unwrap();
    assert!(page.contains("<title>routersim replay: trace.jsonl</title>"));
}

#[test]
fn the_shipped_page_has_no_script_no_web_font_and_no_remote_address() {
    let tmp = tempfile::tempdir().unwrap();
    let page = fs::read_to_string(run_equal_quanta(tmp.path(), &[]).join("report.html")).unwrap();
    // The SVG namespace is a name, not a load.
    let page = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for banned in [
        "<script",
        "@font-face",
        "url(",
        "<link",
        "<img",
        "<iframe",
        "http:",
        "https:",
    ] {
        assert!(!page.contains(banned), "{banned} in report.html");
    }
}

/// `None` (skip) only when `ROUTERSIM_SKIP_BROWSER=1`; a missing browser otherwise fails.
pub(crate) fn chromium() -> Option<&'static str> {
    if std::env::var("ROUTERSIM_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!("ROUTERSIM_SKIP_BROWSER=1: report.html is not rendered");
        return None;
    }
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install the Debian package `chromium` (`.ci/run` does), or set \
         ROUTERSIM_SKIP_BROWSER=1 to skip the browser tests on purpose"
    );
    Some(CHROMIUM)
}

/// Runs headless Chromium on `page` with `extra` flags and a fresh profile in `profile`;
/// returns (stdout, stderr). A browser that hangs is killed after a minute, failing the test.
/// Its output goes to files beside the profile: a dumped page fills a pipe nobody reads
/// while the test waits.
pub(crate) fn headless(
    browser: &str,
    profile: &Path,
    extra: &[&str],
    page: &Path,
) -> (String, String) {
    let (stdout, stderr) = (profile.with_extension("out"), profile.with_extension("err"));
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(fs::File::create(&stdout).unwrap())
        .stderr(fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!(
                "chromium did not finish within a minute on {}",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    let text = |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap()).into_owned();
    assert!(status.success(), "chromium failed: {}", text(&stderr));
    (text(&stdout), text(&stderr))
}

/// Records every error event (a failed load fires one on its element) from the first moment.
const ERROR_LISTENER: &str = "<script>window.__errors=[];addEventListener('error',function(e){\
var t=e.target;__errors.push(String((t&&(t.src||t.href))||e.message));},true);</script>";

/// On load, measures what a person should see and writes it as JSON into `pre#harness`.
const MEASURE: &str = r#"<script>addEventListener('load',function(){
function seen(el){if(!el)return {w:0,h:0,shown:false};var r=el.getBoundingClientRect(),s=getComputedStyle(el);
return {w:r.width,h:r.height,shown:s.display!=='none'&&s.visibility!=='hidden'&&parseFloat(s.opacity)>0};}
var t=document.getElementById('classes');
var out={errors:__errors,resources:performance.getEntriesByType('resource').map(function(e){return e.name;}),
fonts:document.fonts.size,
classes:Object.assign(seen(t),{rows:t?[].map.call(t.tBodies[0].rows,function(r){return r.cells[0].textContent;}):[]}),
charts:[].map.call(document.querySelectorAll('figure.chart'),function(f){return Object.assign(seen(f.querySelector('svg')),{id:f.id});}),
verdicts:[].map.call(document.querySelectorAll('#verdicts tbody tr'),function(r){var c=r.cells[0];
return Object.assign(seen(c),{verdict:c.textContent,label:r.cells[1].textContent,background:getComputedStyle(c).backgroundColor});})};
var p=document.createElement('pre');p.id='harness';p.textContent=JSON.stringify(out);document.body.appendChild(p);});</script>"#;

/// `report` with the measuring scripts added, as `checked.html` beside it.
fn instrumented(report: &Path, extra_body: &str) -> PathBuf {
    let page = fs::read_to_string(report).unwrap();
    let page = page
        .replacen("<head>", &format!("<head>{ERROR_LISTENER}"), 1)
        .replacen("</body>", &format!("{extra_body}{MEASURE}</body>"), 1);
    let checked = report.with_file_name("checked.html");
    fs::write(&checked, page).unwrap();
    checked
}

/// Renders `page` and returns the harness's measurements and Chromium's console lines.
fn measure(browser: &str, dir: &Path, page: &Path) -> (serde_json::Value, Vec<String>) {
    let flags = [
        "--window-size=1280,4000",
        "--virtual-time-budget=5000",
        "--dump-dom",
    ];
    let (dom, stderr) = headless(browser, &dir.join("profile-dom"), &flags, page);
    let start = dom.find("<pre id=\"harness\">").expect("the harness ran") + 18;
    let end = start + dom[start..].find("</pre>").unwrap();
    let json = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(String::from)
        .collect();
    (serde_json::from_str(&json).unwrap(), console)
}

/// What `routersim check` says of each expectation: (PASS or FAIL, label), in order.
fn check_verdicts(dir: &Path) -> Vec<(String, String)> {
    let scenario = scenario();
    let (code, stdout, stderr) = run_in_dir(dir, &["check", &scenario, "--set", EQUAL_QUANTA]);
    assert_eq!(code, 1, "some expectation fails: {stdout}{stderr}");
    stdout
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let (verdict, rest) = l.split_once("  ")?;
            let label = rest.split(" = ").next()?;
            matches!(verdict, "PASS" | "FAIL").then(|| (verdict.to_string(), label.to_string()))
        })
        .collect()
}

fn size(v: &serde_json::Value) -> (f64, f64, bool) {
    (
        v["w"].as_f64().unwrap(),
        v["h"].as_f64().unwrap(),
        v["shown"].as_bool().unwrap(),
    )
}

#[test]
fn in_a_browser_the_class_table_charts_and_verdicts_are_visible_and_nothing_loads() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = run_equal_quanta(tmp.path(), &[]);
    let (seen, console) = measure(
        browser,
        tmp.path(),
        &instrumented(&out.join("report.html"), ""),
    );
    assert_eq!(console, Vec::<String>::new(), "console messages");
    assert_eq!(seen["errors"], serde_json::json!([]), "failed loads");
    assert_eq!(
        seen["resources"],
        serde_json::json!([]),
        "the page loads nothing"
    );
    assert_eq!(seen["fonts"], 0, "no web fonts");
    let (w, h, shown) = size(&seen["classes"]);
    assert!(w > 300.0 && h > 40.0 && shown, "class table {w}x{h}");
    assert_eq!(
        seen["classes"]["rows"],
        serde_json::json!(["premium", "regular"])
    );
    let mut svgs: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".svg").map(|s| format!("chart-{s}")))
        .collect();
    svgs.sort();
    let charts = seen["charts"].as_array().unwrap();
    let mut ids: Vec<String> = charts
        .iter()
        .map(|c| c["id"].as_str().unwrap().into())
        .collect();
    ids.sort();
    assert_eq!(ids, svgs, "every plot is on the page");
    for chart in charts {
        let (w, h, shown) = size(chart);
        assert!(w > 400.0 && h > 200.0 && shown, "{chart}");
    }
    let verdicts = seen["verdicts"].as_array().unwrap();
    let on_page: Vec<(String, String)> = verdicts
        .iter()
        .map(|v| {
            (
                v["verdict"].as_str().unwrap().into(),
                v["label"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        on_page,
        check_verdicts(tmp.path()),
        "the page agrees with `check`"
    );
    assert!(on_page.iter().any(|v| v.0 == "PASS") && on_page.iter().any(|v| v.0 == "FAIL"));
    let background = |verdict: &str| {
        let v = verdicts.iter().find(|v| v["verdict"] == verdict).unwrap();
        assert!(size(v).0 > 0.0 && size(v).2, "{v}");
        v["background"].as_str().unwrap().to_string()
    };
    assert_ne!(
        background("PASS"),
        background("FAIL"),
        "verdicts look different"
    );
}

#[test]
fn the_browser_harness_catches_a_failed_load_and_a_console_message() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = run_equal_quanta(tmp.path(), &[]);
    let broken = "<img src=\"missing.png\"><script>console.error('broken page')</script>";
    let (seen, console) = measure(
        browser,
        tmp.path(),
        &instrumented(&out.join("report.html"), broken),
    );
    let errors = seen["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().ends_with("missing.png")),
        "{errors:?}"
    );
    assert!(
        console.iter().any(|l| l.contains("broken page")),
        "{console:?}"
    );
}

#[test]
fn a_screenshot_of_the_report_is_not_blank() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = run_equal_quanta(tmp.path(), &[]);
    let png = tmp.path().join("report.png");
    let flags = [
        format!("--screenshot={}", png.display()),
        "--window-size=1280,4000".into(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    headless(
        browser,
        &tmp.path().join("profile-shot"),
        &flags,
        &out.join("report.html"),
    );
    let (width, height, pixels) = rgb_pixels(&png);
    assert_eq!((width, height), (1280, 4000));
    let inked = pixels.iter().filter(|p| **p != [255, 255, 255]).count();
    let colours: std::collections::BTreeSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(
        inked * 50 > pixels.len(),
        "under 2% of the screenshot is not white: {inked}"
    );
    assert!(
        colours.len() > 64,
        "only {} colours: a blank page",
        colours.len()
    );
}

/// The PNG's size and its pixels as RGB.
fn rgb_pixels(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let mut decoder = png::Decoder::new(fs::File::open(path).unwrap());
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buffer).unwrap();
    let channels = frame.color_type.samples();
    let pixels = buffer[..frame.buffer_size()]
        .chunks(channels)
        .map(|p| match channels {
            1 | 2 => [p[0]; 3],
            _ => [p[0], p[1], p[2]],
        })
        .collect();
    (frame.width, frame.height, pixels)
}

/// On load, measures each pool table (its header cells, first cells, size) and the note that
/// says what `busy` means, and writes them as JSON into `pre#pools`.
const MEASURE_POOLS: &str = r#"<script>addEventListener('load',function(){
function seen(el){var r=el.getBoundingClientRect(),s=getComputedStyle(el);
return {w:r.width,h:r.height,shown:s.display!=='none'&&s.visibility!=='hidden'};}
var out={tables:[].map.call(document.querySelectorAll('table[id^="pool-table"]'),function(t){
return Object.assign(seen(t),{id:t.id,header:[].map.call(t.tHead.rows[0].cells,function(c){return c.textContent;}),
rows:[].map.call(t.tBodies[0].rows,function(r){return [].map.call(r.cells,function(c){return c.textContent;});})});}),
notes:[].filter.call(document.querySelectorAll('p'),function(p){return p.textContent.indexOf('busy:')===0;}).map(function(p){return Object.assign(seen(p),{text:p.textContent});})};
var p=document.createElement('pre');p.id='pools';p.textContent=JSON.stringify(out);document.body.appendChild(p);});</script>"#;

#[test]
fn in_a_browser_a_disaggregated_run_shows_each_roles_own_figures_and_what_busy_means() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fidelity/disagg-prefix-missing");
    let trace = fixture.join("dynamo.trace.jsonl").display().to_string();
    let prefill = fixture.join("prefill.json").display().to_string();
    let args = [
        "replay",
        "--trace",
        &trace,
        "--prefill-workers",
        "1",
        "--decode-workers",
        "1",
        "--prefill-engine",
        &prefill,
        "--quiet",
        "--out",
        "out",
    ];
    let (code, _, stderr) = run_in_dir(tmp.path(), &args);
    assert_eq!(code, 0, "{stderr}");
    let page = instrumented(&tmp.path().join("out/report.html"), MEASURE_POOLS);
    let flags = [
        "--window-size=1280,4000",
        "--virtual-time-budget=5000",
        "--dump-dom",
    ];
    let (dom, _) = headless(browser, &tmp.path().join("profile-pools"), &flags, &page);
    let seen = harness_json(&dom, "pools");
    let tables = seen["tables"].as_array().unwrap();
    let ids: Vec<&str> = tables.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["pool-table-prefill", "pool-table-decode"]);
    let header = |t: &serde_json::Value| -> Vec<String> {
        let cells = t["header"].as_array().unwrap();
        cells
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    for (table, own) in tables.iter().zip([
        &["busy", "wait p99", "prefill p99", "xfer p99"][..],
        &["busy", "itl p99", "decode p99"][..],
    ]) {
        let (w, h, shown) = size(table);
        assert!(w > 300.0 && h > 30.0 && shown, "{table}");
        let header = header(table);
        for column in own {
            assert!(
                header.iter().any(|c| c == column),
                "{column} missing: {header:?}"
            );
        }
        assert!(
            !header
                .iter()
                .any(|c| c.contains("ttft") || c.contains("e2e")),
            "{header:?}"
        );
    }
    assert_eq!(tables[0]["rows"][0][0], "prefill");
    assert_eq!(tables[1]["rows"][0][0], "decode");
    let notes = seen["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{seen}");
    let (w, h, shown) = size(&notes[0]);
    assert!(w > 100.0 && h > 10.0 && shown, "{}", notes[0]);
    assert!(
        notes[0]["text"].as_str().unwrap().contains("not full"),
        "{}",
        notes[0]
    );
}

/// On load, reads what a plan page shows a person: each binding table's row, every probe
/// table's cells, and the capacity chart's visible texts, as JSON into `pre#plan-harness`.
const MEASURE_PLAN: &str = r#"<script>addEventListener('load',function(){
function cells(r){return [].map.call(r.cells,function(c){return c.textContent;});}
function shown(el){var r=el.getBoundingClientRect(),s=getComputedStyle(el);return r.width>0&&r.height>0&&s.display!=='none'&&s.visibility!=='hidden';}
var out={binding:[].map.call(document.querySelectorAll('table[id^=binding] tbody tr'),cells),
header:[].map.call(document.querySelectorAll('table[id^=binding] thead th'),function(c){return c.textContent;}),
probes:[].concat.apply([],[].map.call(document.querySelectorAll('table[id^=probes] tbody tr'),cells)),
chart:[].filter.call(document.querySelectorAll('#chart-capacity svg text'),shown).map(function(t){return t.textContent.trim();})};
var p=document.createElement('pre');p.id='plan-harness';p.textContent=JSON.stringify(out);document.body.appendChild(p);});</script>"#;

#[test]
fn in_a_browser_a_plan_names_the_failing_slo_as_binding_says_yes_or_no_and_marks_whole_workers() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let disaggregated =
        scenario().replace("premium-vs-regular-weighted", "disaggregated-two-tenants");
    let args = [
        "plan",
        &disaggregated,
        "--minimize",
        "workers.prefill.count+workers.decode.count",
        "--range",
        "2..8",
        "--quiet",
        "--out",
        "plan",
    ];
    let (code, _, stderr) = run_in_dir(tmp.path(), &args);
    assert_eq!(code, 0, "{stderr}");
    let report = tmp.path().join("plan/report.html");
    let page = fs::read_to_string(&report).unwrap();
    let checked = report.with_file_name("checked.html");
    fs::write(
        &checked,
        page.replacen("</body>", &format!("{MEASURE_PLAN}</body>"), 1),
    )
    .unwrap();
    let flags = [
        "--window-size=1280,4000",
        "--virtual-time-budget=5000",
        "--dump-dom",
    ];
    let (dom, _) = headless(browser, &tmp.path().join("profile-plan"), &flags, &checked);
    let start = dom
        .find("<pre id=\"plan-harness\">")
        .expect("the harness ran")
        + 23;
    let end = start + dom[start..].find("</pre>").unwrap();
    let json = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let seen: serde_json::Value = serde_json::from_str(&json).unwrap();
    // Two prefill workers need three decode workers: with two, the premium SLO fails (and the
    // run falls behind). The kept `stable: true` at the answer does not bind; the SLO does.
    let bindings = seen["binding"].as_array().unwrap();
    let two_prefill = &bindings[1];
    assert_eq!(two_prefill[0], "premium p99 TTFT SLO", "{seen}");
    assert_eq!(
        two_prefill[4], "2",
        "it fails just past the answer, at 2 decode workers"
    );
    assert!(
        two_prefill[6]
            .as_str()
            .unwrap()
            .ends_with("keeps up with the load; overloaded"),
        "{two_prefill}"
    );
    assert!(
        bindings.iter().all(|b| b[0] != "keeps up with the load"),
        "{bindings:?}"
    );
    // A yes-or-no expectation reads yes or no, never 1 or 0.
    let probes: Vec<&str> = seen["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        probes.contains(&"yes PASS") && probes.contains(&"no FAIL"),
        "{probes:?}"
    );
    assert!(
        !probes
            .iter()
            .any(|c| c.starts_with("1 ") || c.starts_with("0 ")),
        "{probes:?}"
    );
    // The frontier chart counts whole workers and marks the answer.
    let texts: Vec<&str> = seen["chart"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(texts.contains(&"fewest in all: 2 + 3 = 5"), "{texts:?}");
    let numbers: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|t| t.parse::<f64>().is_ok())
        .collect();
    assert!(numbers.len() >= 5, "{texts:?}");
    assert!(
        numbers.iter().all(|t| t.parse::<u64>().is_ok()),
        "whole workers: {numbers:?}"
    );
}

/// On load, reads a scaled run's fleet section as a person sees it: the fleet table's rows,
/// where each chart of the row sits, and the legend texts of the workers chart, as JSON into
/// `pre#fleet-harness`.
const MEASURE_FLEET: &str = r#"<script>addEventListener('load',function(){
function box(el){var r=el.getBoundingClientRect(),s=getComputedStyle(el);return {id:el.id,left:r.left,top:r.top,w:r.width,h:r.height,shown:s.display!=='none'&&s.visibility!=='hidden'};}
var out={rows:[].map.call(document.querySelectorAll('#fleet-table tbody tr'),function(r){return [].map.call(r.cells,function(c){return c.textContent;});}),
row:[].map.call(document.querySelectorAll('.row figure.chart'),box),
legend:[].map.call(document.querySelectorAll('#chart-workers_over_time svg text'),function(t){return t.textContent.trim();}),
plots:[].map.call(document.querySelectorAll('figure.chart'),function(f){return f.id;})};
var p=document.createElement('pre');p.id='fleet-harness';p.textContent=JSON.stringify(out);document.body.appendChild(p);});</script>"#;

/// The JSON a measuring script wrote into `<pre id="{id}">` of the dumped `dom`.
fn harness_json(dom: &str, id: &str) -> serde_json::Value {
    let open = format!("<pre id=\"{id}\">");
    let start = dom.find(&open).expect("the measuring script ran") + open.len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let json = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap()
}

#[test]
fn in_a_browser_a_scaled_run_shows_its_fleet_cost_and_its_workers_beside_its_latency() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fidelity/planner-load-agg");
    let path = |name: &str| fixture.join(name).display().to_string();
    let (trace, engine, planner) = (
        path("trace.jsonl"),
        path("engine.json"),
        path("planner.yaml"),
    );
    let args = [
        "replay",
        "--trace",
        &trace,
        "--engine",
        &engine,
        "--router-mode",
        "round_robin",
        "--planner",
        &planner,
        "--plots",
        "--quiet",
        "--out",
        "out",
    ];
    let (code, _, stderr) = run_in_dir(tmp.path(), &args);
    assert_eq!(code, 0, "{stderr}");
    let page = instrumented(&tmp.path().join("out/report.html"), MEASURE_FLEET);
    let flags = [
        "--window-size=1280,4000",
        "--virtual-time-budget=5000",
        "--dump-dom",
    ];
    let (dom, _) = headless(browser, &tmp.path().join("profile-fleet"), &flags, &page);
    let seen = harness_json(&dom, "fleet-harness");
    let rows = seen["rows"].as_array().unwrap();
    let first_cells: Vec<&str> = rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(first_cells, ["aggregated", "all"], "{seen}");
    let peak = rows[1][2].as_str().unwrap();
    assert!(peak.parse::<u64>().unwrap() > 1, "the fleet grew: {seen}");
    let row = seen["row"].as_array().unwrap();
    let ids: Vec<&str> = row.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["chart-workers_over_time", "chart-latency_over_time"]);
    let f = |c: &serde_json::Value, k: &str| c[k].as_f64().unwrap();
    for chart in row {
        assert!(f(chart, "w") > 300.0 && f(chart, "h") > 150.0, "{chart}");
        assert!(chart["shown"].as_bool().unwrap(), "{chart}");
    }
    assert_eq!(f(&row[0], "top"), f(&row[1], "top"), "side by side");
    assert!(
        f(&row[0], "left") + f(&row[0], "w") <= f(&row[1], "left"),
        "{seen}"
    );
    let legend = seen["legend"].as_array().unwrap();
    for label in ["aggregated serving", "aggregated billed"] {
        assert!(legend.iter().any(|t| t == label), "{label} in {legend:?}");
    }
    let plots = seen["plots"].as_array().unwrap();
    let once = |id: &str| plots.iter().filter(|p| *p == id).count() == 1;
    assert!(
        once("chart-workers_over_time") && once("chart-latency_over_time"),
        "{plots:?}"
    );
}
