//! Tidy: the layer rule (docs/architecture.md), the names banned for determinism, the one
//! driver of the scheduling core, and that the repository's text names nothing outside the
//! repository.

use std::fs;
use std::path::{Path, PathBuf};

/// Layer of each top-level module; a module may use only modules of lower layers.
const LAYERS: [(&str, u8); 19] = [
    ("time", 0),
    ("text", 0),
    ("memory", 0),
    ("rng", 0),
    ("bounds", 0),
    ("yaml", 0),
    ("scheduling", 1),
    ("engine", 1),
    ("mocker", 2),
    ("workload", 2),
    ("sim", 3),
    ("scenario", 4),
    ("report", 4),
    ("planner", 4),
    ("pipeline", 5),
    ("sweep", 6),
    ("plan", 6),
    ("cli", 7),
    ("main", 7),
];

/// Uses across one layer that are allowed: the expectation syntax (`report::verdict::expect`)
/// and the planner's keys (`planner::config`) are vocabulary scenarios are written in, so
/// scenario parsing may name them.
const ALLOWED_SAME_LAYER: [(&str, &str); 2] = [
    ("scenario", "crate::report::verdict::expect"),
    ("scenario", "crate::planner::config"),
];

/// Test-only files allowed to use a higher layer: the report tests' fixtures run through the
/// one run pipeline, as the commands do.
const ALLOWED_TEST_UPWARD: [(&str, &str); 1] = [("report/test_support.rs", "crate::pipeline")];

/// Names that break determinism (or hide iteration order) anywhere outside `cli`.
const BANNED: [&str; 7] = [
    "std::collections::HashMap",
    "std::collections::HashSet",
    "Instant::now",
    "SystemTime",
    "thread_rng",
    "StdRng",
    "rand::rng()",
];

/// Layers at or below this one take text, not paths: reading files is the job of the layers
/// above (through `bounds`' capped reader, which is the one exception).
const NO_FILE_IO_UP_TO_LAYER: u8 = 1;

/// Calls that touch the file system.
const FILE_IO: [&str; 8] = [
    "std::fs",
    "fs::read",
    "fs::write",
    "File::open",
    "File::create",
    "OpenOptions",
    "read_to_string_capped",
    "read_bytes_capped",
];

/// Calls that open a file to read it. Outside `bounds` (and tests) none may appear: every
/// read goes through `bounds::open_regular` and a size cap.
const OPENS_FOR_READING: [&str; 4] = [
    "File::open",
    "fs::read(",
    "fs::read_to_string(",
    "OpenOptions",
];

/// Test-only files, which read fixtures directly.
const TEST_FILES: [&str; 4] = [
    "tests.rs",
    "test_support.rs",
    "proptests.rs",
    "dynamo_parity.rs",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel
        .components()
        .next()
        .expect("non-empty")
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn source_files() -> (PathBuf, Vec<PathBuf>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    (src, files)
}

/// One file of src/, read: its path relative to src/ (forward slashes), its path, its text.
pub(crate) struct SourceFile {
    pub rel: String,
    pub path: PathBuf,
    pub text: String,
}

impl SourceFile {
    /// Its lines, numbered from 1, before the inline test module at its end (if any).
    pub fn code_lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.text
            .lines()
            .take_while(|l| l.trim() != "mod tests {")
            .enumerate()
            .map(|(i, line)| (i + 1, line))
    }
}

/// Every file of src/, read, sorted by path.
pub(crate) fn read_sources() -> Vec<SourceFile> {
    let (src, files) = source_files();
    files
        .into_iter()
        .map(|path| SourceFile {
            rel: path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
            text: fs::read_to_string(&path).unwrap(),
            path,
        })
        .collect()
}

#[test]
fn modules_use_only_lower_layers() {
    let (src, files) = source_files();
    let mut violations = Vec::new();
    for file in files {
        let module = top_module(&src, &file);
        if module == "lib" {
            continue;
        }
        let own = layer(&module).unwrap_or_else(|| panic!("{module} has no layer in LAYERS"));
        let text = fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for (other, other_layer) in LAYERS {
                let uses = line.contains(&format!("crate::{other}::"))
                    || line.contains(&format!("crate::{other};"))
                    || line.contains(&format!("crate::{{{other}"));
                let allowed = ALLOWED_SAME_LAYER
                    .iter()
                    .any(|(m, path)| *m == module && line.contains(path) && other_layer == own);
                let test_upward = ALLOWED_TEST_UPWARD
                    .iter()
                    .any(|(f, path)| file.ends_with(f) && line.contains(path));
                if uses && other != module && other_layer >= own && !allowed && !test_upward {
                    violations.push(format!(
                        "{}:{}: {module} uses {other}",
                        file.display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layer violations:\n{}",
        violations.join("\n")
    );
}

#[test]
fn low_layers_do_no_file_io() {
    let (src, files) = source_files();
    let mut violations = Vec::new();
    for file in files {
        let module = top_module(&src, &file);
        let low = layer(&module).is_some_and(|l| l <= NO_FILE_IO_UP_TO_LAYER);
        if !low || module == "bounds" {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for call in FILE_IO.iter().filter(|call| line.contains(*call)) {
                violations.push(format!(
                    "{}:{}: {module} uses {call}",
                    file.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "file IO below layer {}:\n{}",
        NO_FILE_IO_UP_TO_LAYER + 1,
        violations.join("\n")
    );
}

/// Whether `line` calls `call` itself (not a longer name ending in it, as `NpzFile::open`).
fn calls(line: &str, call: &str) -> bool {
    line.match_indices(call).any(|(at, _)| {
        !line[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn every_read_goes_through_bounds() {
    let mut violations = Vec::new();
    for file in read_sources() {
        if file.rel == "bounds.rs" || TEST_FILES.iter().any(|t| file.rel.ends_with(t)) {
            continue;
        }
        // An inline test module at the end of a file may read fixtures.
        for (n, line) in file.code_lines() {
            for call in OPENS_FOR_READING.iter().filter(|call| calls(line, call)) {
                violations.push(format!("{}:{n}: {call}", file.path.display()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "files opened for reading outside bounds::open_regular:\n{}",
        violations.join("\n")
    );
}

#[test]
fn no_banned_names_outside_the_cli() {
    let (src, files) = source_files();
    let mut violations = Vec::new();
    for file in files {
        if top_module(&src, &file) == "cli" {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for name in BANNED {
                if line.contains(name) {
                    violations.push(format!("{}:{}: {name}", file.display(), i + 1));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "banned names:\n{}",
        violations.join("\n")
    );
}

#[test]
fn every_source_file_says_what_it_owns() {
    let (_, files) = source_files();
    let missing: Vec<_> = files
        .iter()
        .filter(|f| !fs::read_to_string(f).unwrap().starts_with("//!"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a //! header: {missing:?}"
    );
}

/// Where the repository's own text lives (comments, docs, scripts, data): what a citation of
/// something outside the repository is looked for in.
const OWN_TEXT: [&str; 8] = [
    "src",
    "tests",
    "benches",
    "tools",
    "docs",
    "scenarios",
    ".ci",
    "README.md",
];

/// Names of what a clone of the repository does not have: the design notes, the folder of
/// behaviour specs and the sign of their numbered sections, the shared folder beside the
/// repository, and absolute paths of the machine it was written on. Spelled in pieces, so
/// that this list is not itself a citation.
const OUTSIDE_NAMES: [&str; 5] = [
    concat!("DESIGN", ".md"),
    concat!("spec", "/"),
    concat!("..", "/shared"),
    concat!("/", "work/"),
    "\u{a7}",
];

/// Every file under `path` (or `path` itself), sorted.
fn files_under(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    let mut entries: Vec<PathBuf> = fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .map(|entry| entry.expect("dir entry").path())
        .collect();
    entries.sort();
    for entry in entries {
        files_under(&entry, out);
    }
}

/// The outside names `line` mentions. A name counts where no word character is glued to its
/// front: a folder whose name merely ends in one of them is not it, nor is a relative path.
fn outside_names_in(line: &str) -> Vec<&'static str> {
    let glued = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    OUTSIDE_NAMES
        .into_iter()
        .filter(|name| {
            line.match_indices(name)
                .any(|(at, _)| line[..at].chars().next_back().is_none_or(|c| !glued(c)))
        })
        .collect()
}

#[test]
fn no_text_names_anything_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for own in OWN_TEXT {
        files_under(&root.join(own), &mut files);
    }
    let mut citations = Vec::new();
    for file in &files {
        // Binary files (profiles, plots) hold no prose.
        let Ok(text) = String::from_utf8(fs::read(file).unwrap()) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            for name in outside_names_in(line) {
                let shown = file.strip_prefix(root).unwrap_or(file).display();
                citations.push(format!("{shown}:{}: names {name}", i + 1));
            }
        }
    }
    assert!(
        files.len() > 100,
        "only {} files found: the walk is broken",
        files.len()
    );
    assert!(
        citations.is_empty(),
        "text naming what a clone does not have (describe it in docs/ and name that):\n{}",
        citations.join("\n")
    );
}

#[test]
fn each_outside_name_is_caught_and_look_alikes_are_not() {
    for name in OUTSIDE_NAMES {
        for line in [
            name.to_string(),
            format!("// as {name}x says"),
            format!("(`{name}`)"),
        ] {
            assert_eq!(outside_names_in(&line), [name], "{line}");
        }
    }
    for clean in [
        "docs/scheduling.md#busy-thresholds",
        concat!("a res", "pec/ of the ins", "pec/ dir"),
        concat!("lib/w", "ork/x and MY_DESIGN", ".md"),
        "tools/dynamo-replay --trace t.jsonl",
    ] {
        assert!(outside_names_in(clean).is_empty(), "{clean}");
    }
}

/// The one file outside `scheduling/` that feeds the scheduling core its inputs
/// (docs/scheduling.md#the-state-machine): the rest of the simulator goes through it.
const CORE_DRIVER: &str = "sim/driver.rs";

/// The scheduling core's inputs: the `handle_*` methods `Scheduler` defines (before its tests),
/// in scheduler.rs and the topic files beside it (the worker set's in discovery.rs).
fn core_inputs(src: &Path) -> Vec<String> {
    let mut text = fs::read_to_string(src.join("scheduling/scheduler.rs")).unwrap();
    text += &fs::read_to_string(src.join("scheduling/scheduler/discovery.rs")).unwrap();
    let inputs: Vec<String> = text
        .lines()
        .take_while(|l| l.trim() != "mod tests {")
        .filter_map(|l| l.trim().strip_prefix("pub fn handle_"))
        .filter_map(|rest| rest.split_once('('))
        .map(|(name, _)| format!("handle_{name}"))
        .collect();
    assert!(
        inputs.len() > 5,
        "only {inputs:?} found: the scan is broken"
    );
    inputs
}

/// The core inputs `line` calls as methods (`.handle_tick(`): not a definition, nor another
/// type's method whose name merely starts the same (`Model::handle(`, `.handle_ticks(`).
fn core_input_calls_in<'a>(line: &str, inputs: &'a [String]) -> Vec<&'a str> {
    inputs
        .iter()
        .filter(|input| line.contains(&format!(".{input}(")))
        .map(String::as_str)
        .collect()
}

#[test]
fn only_the_driver_calls_the_scheduling_core_inputs() {
    let (src, _) = source_files();
    let inputs = core_inputs(&src);
    let mut violations = Vec::new();
    for file in read_sources() {
        let rel = file.rel.as_str();
        let exempt = rel.starts_with("scheduling/")
            || rel == CORE_DRIVER
            || TEST_FILES.iter().any(|t| rel.ends_with(t))
            || rel.ends_with("_tests.rs");
        if exempt {
            continue;
        }
        // An inline test module at the end of a file may drive a core of its own.
        for (n, line) in file.code_lines() {
            for input in core_input_calls_in(line, &inputs) {
                violations.push(format!("{}:{n}: {input}", file.path.display()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "the scheduling core's inputs called outside {CORE_DRIVER}:\n{}",
        violations.join("\n")
    );
}

#[test]
fn each_core_input_call_is_caught_and_look_alikes_are_not() {
    let (src, _) = source_files();
    let inputs = core_inputs(&src);
    for input in ["handle_tick", "handle_arrival", "handle_finished"] {
        assert!(
            inputs.iter().any(|i| i == input),
            "{input} not in {inputs:?}"
        );
    }
    for line in [
        "self.core.handle_tick(now);",
        "        router.core_mut().handle_arrival(now, request)",
    ] {
        assert_eq!(core_input_calls_in(line, &inputs).len(), 1, "{line}");
    }
    for clean in [
        "model.handle(now, event, &mut self.queue);",
        "pub fn handle_tick(&mut self, now: SimTime) {",
        "self.handle_ticks(now);",
        "// the core's handle_tick runs at poll_timeout",
    ] {
        assert!(core_input_calls_in(clean, &inputs).is_empty(), "{clean}");
    }
}

/// The rooms of `report`, lowest first: a file in one may use only the rooms before it
/// (docs/architecture.md). `output` writes files, `render` makes their bytes, `verdict`
/// judges, `measure` computes the figures.
const REPORT_ROOMS: [&str; 4] = ["measure", "verdict", "render", "output"];

/// The rooms below `output`, which touch no file (`render`'s exporters make bytes only).
const REPORT_ROOMS_WITHOUT_FILE_IO: usize = 3;

/// The room of a file (its path relative to src/), if it is in one.
fn report_room(rel: &str) -> Option<usize> {
    let room = rel.strip_prefix("report/")?.split('/').next()?;
    REPORT_ROOMS.iter().position(|r| *r == room)
}

/// Whether `line` names `name` as a whole word (not `outputs` for `output`).
fn names_word(line: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(name).any(|(at, _)| {
        !line[..at].chars().next_back().is_some_and(word)
            && !line[at + name.len()..].chars().next().is_some_and(word)
    })
}

/// The rooms of `report` that `line` reaches by path: `report::verdict`, `super::verdict`
/// (and `super::super::verdict`), or a room inside a `report::{...}` group.
fn rooms_named(line: &str) -> Vec<&'static str> {
    let group = line.split_once("report::{").map(|(_, rest)| rest);
    REPORT_ROOMS
        .into_iter()
        .filter(|room| {
            names_word(line, &format!("report::{room}"))
                || names_word(line, &format!("super::{room}"))
                || group.is_some_and(|g| names_word(g, room))
        })
        .collect()
}

/// The rooms above its own that a line of the file at `rel` uses.
fn upward_room_uses(rel: &str, line: &str) -> Vec<&'static str> {
    let Some(own) = report_room(rel) else {
        return Vec::new();
    };
    rooms_named(line)
        .into_iter()
        .filter(|room| report_room(&format!("report/{room}/")).is_some_and(|r| r > own))
        .collect()
}

#[test]
fn report_rooms_use_only_lower_rooms() {
    let files = read_sources();
    for room in REPORT_ROOMS {
        let prefix = format!("report/{room}/");
        assert!(
            files.iter().any(|f| f.rel.starts_with(&prefix)),
            "src/report/{room}/ is gone: update REPORT_ROOMS"
        );
    }
    let mut violations = Vec::new();
    for file in files
        .iter()
        .filter(|f| !TEST_FILES.iter().any(|t| f.rel.ends_with(t)))
    {
        let Some(own) = report_room(&file.rel) else {
            continue;
        };
        for (n, line) in file.code_lines() {
            for room in upward_room_uses(&file.rel, line) {
                violations.push(format!("src/{}:{n}: uses report::{room}", file.rel));
            }
            if own < REPORT_ROOMS_WITHOUT_FILE_IO {
                for call in FILE_IO.iter().filter(|call| line.contains(*call)) {
                    violations.push(format!("src/{}:{n}: uses {call}", file.rel));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "report's rooms are {REPORT_ROOMS:?}, each using only those before it, and only \
         output touches files:\n{}",
        violations.join("\n")
    );
}

#[test]
fn each_upward_room_use_is_caught_and_look_alikes_are_not() {
    for (rel, line, rooms) in [
        (
            "report/measure/slo.rs",
            "use crate::report::verdict::queries::Queries;",
            &["verdict"][..],
        ),
        (
            "report/measure/mod.rs",
            "pub use super::render::table;",
            &["render"],
        ),
        (
            "report/verdict/evaluate.rs",
            "use super::super::render::junit;",
            &["render"],
        ),
        (
            "report/render/plots.rs",
            "use crate::report::output::file_name_part;",
            &["output"],
        ),
        (
            "report/render/table.rs",
            "use crate::report::{measure::metrics, output::FileBody};",
            &["output"],
        ),
        (
            "report/verdict/expect.rs",
            "let p = crate::report::render::plots::bounds();",
            &["render"],
        ),
    ] {
        assert_eq!(upward_room_uses(rel, line), rooms, "{rel}: {line}");
    }
    for (rel, line) in [
        (
            "report/render/plots.rs",
            "use crate::report::verdict::expect::Bound;",
        ),
        (
            "report/render/plots.rs",
            "use crate::report::measure::metrics::RunMetrics;",
        ),
        (
            "report/output/run_files.rs",
            "use crate::report::render::{chart, plots};",
        ),
        (
            "report/measure/metrics.rs",
            "use super::pools::{PoolMetrics, pool_metrics};",
        ),
        (
            "report/measure/metrics.rs",
            "let output = render_table(verdict);",
        ),
        (
            "report/measure/metrics.rs",
            "use crate::report::outputs::x; // report::renderer",
        ),
        ("sweep/report.rs", "use crate::report::output::OutputKind;"),
        ("report/mod.rs", "pub mod output;"),
    ] {
        assert!(upward_room_uses(rel, line).is_empty(), "{rel}: {line}");
    }
}

/// Whether `line` imports everything of its parent module at file level (a test module's
/// `    use super::*;` is indented and allowed).
fn is_file_level_glob_import(line: &str) -> bool {
    line.starts_with("use super::*;")
}

#[test]
fn production_code_names_what_it_imports() {
    let mut found = Vec::new();
    for file in read_sources() {
        let tests_only = file.rel.ends_with("tests.rs") || file.rel.contains("/tests/");
        let globbed = (file.code_lines()).find(|(_, line)| is_file_level_glob_import(line));
        if let (Some((n, _)), false) = (globbed, tests_only) {
            found.push(format!("src/{}:{n}", file.rel));
        }
    }
    assert!(
        found.is_empty(),
        "`use super::*;` at file level hides where names come from (and lets one type's methods \
         spread over files): import them by name:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_file_level_glob_import_is_caught_and_a_test_modules_is_not() {
    assert!(is_file_level_glob_import("use super::*;"));
    assert!(!is_file_level_glob_import("    use super::*;"));
    assert!(!is_file_level_glob_import(
        "use super::{Scheduler, SchedulerError};"
    ));
}
