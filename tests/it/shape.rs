//! The shape of the simulated system, kept by test: only the worker fleet builds workers
//! (through their kind), so every worker gets the same set-up; only a kind builds its own
//! workers; only `sim::resolve` builds a run's configuration; and no file or function in src/
//! outgrows what a reader can hold.

use crate::tidy::{SourceFile, read_sources};

/// The one file that builds workers, through their kind (`WorkerKind::build` with the one
/// `WorkerSetup` every worker gets).
const WORKER_BUILDER: &str = "sim/fleet.rs";

/// What building a worker through its kind takes: a set-up, handed to the kind's `build`.
const BUILDS_THROUGH_A_KIND: [&str; 2] = ["WorkerSetup {", ".build("];

/// Each worker kind's constructors, with the folder (and its `.rs`) that alone may call them.
const KIND_BUILDERS: [(&str, &str); 2] = [
    ("mocker/kind/vllm", "MockWorker::new("),
    ("mocker/kind/vllm", "MockWorker::try_new("),
];

/// Whether a file holds only tests (by its name).
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.ends_with("tests.rs") || name == "test_support.rs" || name == "dynamo_parity.rs"
}

/// Whether `rel` is in the module `module` (its file or its folder).
fn in_module(rel: &str, module: &str) -> bool {
    rel == format!("{module}.rs") || rel.starts_with(&format!("{module}/"))
}

#[test]
fn only_kinds_build_their_workers() {
    let mut builders = Vec::new();
    for file in read_sources() {
        let rel = file.rel.as_str();
        if is_test_file(rel) {
            continue;
        }
        for (n, line) in file.code_lines() {
            for (kind, call) in KIND_BUILDERS {
                if line.contains(call) && !in_module(rel, kind) {
                    builders.push(format!("src/{rel}:{n}: {}", line.trim()));
                }
            }
        }
    }
    assert!(
        builders.is_empty(),
        "a kind's workers are built by its own module alone (src/{WORKER_BUILDER} goes \
         through WorkerKind::build):\n{}",
        builders.join("\n")
    );
}

#[test]
fn the_kinds_really_build_their_workers() {
    let files = read_sources();
    for (kind, _) in KIND_BUILDERS {
        let calls = KIND_BUILDERS.iter().filter(|(k, _)| *k == kind);
        let builds = |line: &str| calls.clone().any(|(_, call)| line.contains(call));
        assert!(
            files
                .iter()
                .any(|f| in_module(&f.rel, kind) && f.code_lines().any(|(_, l)| builds(l))),
            "src/{kind} no longer builds its workers: update KIND_BUILDERS"
        );
    }
}

#[test]
fn only_the_fleet_builds_workers() {
    let mut builders = Vec::new();
    for file in read_sources() {
        let rel = file.rel.as_str();
        if rel.starts_with("mocker/") || is_test_file(rel) || rel == WORKER_BUILDER {
            continue;
        }
        for (n, line) in file.code_lines() {
            if line.contains(BUILDS_THROUGH_A_KIND[0]) {
                builders.push(format!("src/{rel}:{n}: {}", line.trim()));
            }
        }
    }
    assert!(
        builders.is_empty(),
        "workers are built by src/{WORKER_BUILDER} alone (its set-up is every worker's):\n{}",
        builders.join("\n")
    );
}

#[test]
fn the_worker_builder_really_builds_workers() {
    let files = read_sources();
    let fleet = files.iter().find(|f| f.rel == WORKER_BUILDER).unwrap();
    assert!(
        BUILDS_THROUGH_A_KIND
            .iter()
            .all(|call| fleet.code_lines().any(|(_, l)| l.contains(call))),
        "src/{WORKER_BUILDER} no longer builds workers through their kind: update WORKER_BUILDER"
    );
}

/// The most lines a file in src/ has outside its tests.
const MAX_FILE_LINES: usize = 1200;

/// The most lines a function has, its signature and closing brace included.
const MAX_FUNCTION_LINES: usize = 80;

#[test]
fn no_file_in_src_outgrows_its_bound() {
    let long: Vec<String> = read_sources()
        .into_iter()
        .filter(|f| !is_test_file(&f.rel))
        .map(|f| (f.code_lines().count(), f.rel))
        .filter(|&(lines, _)| lines > MAX_FILE_LINES)
        .map(|(lines, rel)| format!("src/{rel}: {lines} lines outside its tests"))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (split them by topic):\n{}",
        long.join("\n")
    );
}

/// Each function of `text` as (first line, name, lines): from its `fn` line to the first
/// closing brace at the same indent (rustfmt's layout).
fn functions(text: &str) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let signature = [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ]
        .iter()
        .fold(code, |rest, prefix| {
            rest.strip_prefix(prefix).unwrap_or(rest)
        });
        let Some(rest) = signature.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // A declaration without a body (a trait's) ends at its `;` before any brace opens.
        let opens = lines[i..]
            .iter()
            .position(|l| l.contains('{') || l.trim_end().ends_with(';'));
        if opens.is_none_or(|o| !lines[i + o].contains('{')) {
            continue;
        }
        if code.contains('{') && code.trim_end().ends_with('}') {
            found.push((i + 1, name, 1));
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|l| *l == close) {
            found.push((i + 1, name, end + 1));
        }
    }
    found
}

#[test]
fn no_function_in_src_outgrows_its_bound() {
    let mut long = Vec::new();
    for file in read_sources() {
        for (line, name, lines) in functions(&file.text) {
            if lines > MAX_FUNCTION_LINES {
                long.push(format!("src/{}:{line}: fn {name}: {lines} lines", file.rel));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them into steps that name themselves):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_measure_counts_from_fn_to_its_closing_brace() {
    let text = "impl A {\n    /// Doc.\n    pub fn short(&self) -> u8 {\n        1\n    }\n\n    fn decl(&self);\n    fn one(&self) -> u8 { 1 }\n}\nfn free() {\n    let x = {\n        2\n    };\n}\n";
    assert_eq!(
        functions(text),
        vec![
            (3, "short".to_string(), 3),
            (8, "one".to_string(), 1),
            (10, "free".to_string(), 5)
        ]
    );
}

/// The one file of the simulated system that may hold a router instance.
const ROUTER_HOLDER: &str = "sim/routers.rs";

/// Whether `line` declares a field or a binding that holds a router instance.
fn holds_a_router(line: &str) -> bool {
    let line = line.trim();
    !line.starts_with("//")
        && (line.ends_with(": RouterDriver,") || line.ends_with(": Option<RouterDriver>,"))
}

#[test]
fn only_routers_holds_router_instances() {
    let holders: Vec<String> = read_sources()
        .iter()
        .filter(|f| f.rel.starts_with("sim") && f.rel != ROUTER_HOLDER && !is_test_file(&f.rel))
        .flat_map(|f| {
            let found = f.code_lines().filter(|(_, line)| holds_a_router(line));
            found
                .map(|(n, line)| format!("src/{}:{n}: {}", f.rel, line.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        holders.is_empty(),
        "router instances held outside {ROUTER_HOLDER} (docs/architecture.md, \"Adding a router instance\"):\n{}",
        holders.join("\n")
    );
}

#[test]
fn a_router_field_is_caught_and_a_mention_is_not() {
    assert!(holds_a_router("    pub decode_router: RouterDriver,"));
    assert!(holds_a_router("    decode: Option<RouterDriver>,"));
    assert!(!holds_a_router("    /// decode: RouterDriver,"));
    assert!(!holds_a_router(
        "pub(super) fn decode_router(config: &SimConfig) -> RouterDriver {"
    ));
}

/// The line of docs/architecture.md that says how long the spine is: `under N lines`.
#[test]
fn the_spine_is_as_short_as_the_architecture_says() {
    let root = env!("CARGO_MANIFEST_DIR");
    let doc = std::fs::read_to_string(format!("{root}/docs/architecture.md")).unwrap();
    let claim = doc
        .lines()
        .find(|l| l.contains("`src/pipeline.rs`: the spine, under "))
        .expect("docs/architecture.md says how long src/pipeline.rs is");
    let bound: usize = claim
        .split("under ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a number of lines");
    let spine = std::fs::read_to_string(format!("{root}/src/pipeline.rs")).unwrap();
    assert!(
        spine.lines().count() < bound,
        "src/pipeline.rs has {} lines; docs/architecture.md says under {bound}",
        spine.lines().count()
    );
}

/// The one file that builds a `SimConfig`: `sim::resolve`, once every rule across the run's
/// fields holds (docs/architecture.md, "Resolve once").
const SIM_CONFIG_BUILDER: &str = "sim/config.rs";

/// Whether `line` builds a `SimConfig` with a struct literal: `SimConfig {` after anything but
/// what opens its declaration, an `impl` block or a function returning one (`struct`, `impl`,
/// `for`, `->`, `&`).
fn builds_a_sim_config(line: &str) -> bool {
    let line = line.trim();
    let not_a_literal = ["struct", "impl", "for", "->", "&", "mut"];
    !line.starts_with("//")
        && line.match_indices("SimConfig {").any(|(at, _)| {
            let before = line[..at].trim_end();
            !not_a_literal.iter().any(|word| before.ends_with(word))
        })
}

/// The lines of `files` outside tests that build a `SimConfig` outside [`SIM_CONFIG_BUILDER`].
fn sim_config_builders(files: &[SourceFile]) -> Vec<String> {
    let mut builders = Vec::new();
    for file in files {
        let rel = file.rel.as_str();
        if rel == SIM_CONFIG_BUILDER || is_test_file(rel) || rel.contains("/tests/") {
            continue;
        }
        for (n, line) in file.code_lines() {
            if builds_a_sim_config(line) {
                builders.push(format!("src/{rel}:{n}: {}", line.trim()));
            }
        }
    }
    builders
}

#[test]
fn only_resolve_builds_a_sim_config() {
    let builders = sim_config_builders(&read_sources());
    assert!(
        builders.is_empty(),
        "a SimConfig is built by sim::resolve alone (src/{SIM_CONFIG_BUILDER}): fill a \
         RunDescription and resolve it, so every rule across its fields is checked:\n{}",
        builders.join("\n")
    );
}

#[test]
fn a_sim_config_literal_outside_resolve_is_caught_and_a_mention_is_not() {
    let file = |rel: &str, text: &str| SourceFile {
        rel: rel.to_string(),
        path: rel.into(),
        text: text.to_string(),
    };
    let literal =
        "fn f() -> SimConfig {\n    let c = SimConfig {\n        seed: 0,\n    };\n    c\n}\n";
    let files = [
        file("pipeline/replay.rs", literal),
        file(SIM_CONFIG_BUILDER, literal),
        file("sim/pool_tests.rs", literal),
        file("sim/tests/disaggregated.rs", literal),
        file(
            "pipeline.rs",
            &format!("fn x() {{}}\n#[cfg(test)]\nmod tests {{\n{literal}}}\n"),
        ),
        file(
            "scenario/validate.rs",
            "/// Unlike `SimConfig { .. }`, a description is unchecked.\npub struct SimConfig {\nimpl Default for SimConfig {\npub fn config(&self) -> &SimConfig {\n",
        ),
        file("pipeline.rs", "    config: crate::sim::SimConfig {\n"),
    ];
    assert_eq!(
        sim_config_builders(&files),
        vec![
            "src/pipeline/replay.rs:2: let c = SimConfig {".to_string(),
            "src/pipeline.rs:1: config: crate::sim::SimConfig {".to_string(),
        ]
    );
}

/// The one file that holds the simulated system and its event queue: it alone schedules
/// events and applies what the parts ask for.
const EVENT_LOOP: &str = "sim/event_loop.rs";

/// What only the event loop may write: the system's impls and the event queue.
const EVENT_LOOP_ONLY: [&str; 4] = ["impl System", "impl Hub", "impl Model for", "EventQueue"];

/// The lines of `file` (outside its tests) that only the event loop may hold.
fn event_loop_lines(file: &SourceFile) -> Vec<String> {
    let found = file.code_lines().filter(|(_, line)| {
        let code = line.trim_start();
        !code.starts_with("//") && EVENT_LOOP_ONLY.iter().any(|w| code.contains(w))
    });
    found
        .map(|(n, line)| format!("src/{}:{n}: {}", file.rel, line.trim()))
        .collect()
}

#[test]
fn only_the_event_loop_schedules_and_holds_the_system() {
    let files = read_sources();
    let in_sim = |f: &&SourceFile| in_module(&f.rel, "sim") && !is_test_file(&f.rel);
    let outside: Vec<String> = (files.iter().filter(in_sim))
        .filter(|f| f.rel != EVENT_LOOP)
        .flat_map(event_loop_lines)
        .collect();
    assert!(
        outside.is_empty(),
        "only src/{EVENT_LOOP} schedules events and implements the system (parts act \
         through sim::effects::Effects):\n{}",
        outside.join("\n")
    );
    let event_loop = files.iter().find(|f| f.rel == EVENT_LOOP).unwrap();
    let held = event_loop_lines(event_loop);
    assert!(
        EVENT_LOOP_ONLY
            .iter()
            .all(|w| held.iter().any(|line| line.contains(w))),
        "src/{EVENT_LOOP} no longer holds the system: update EVENT_LOOP"
    );
}

/// The modules whose files must not use each other in a circle.
const NO_CIRCLES_IN: [&str; 3] = ["sim", "mocker", "report"];

/// The sibling modules `text` (a file of module folder `folder`) names: through `super::`
/// or its full `crate::` path, one name or a `{...}` group of them.
fn sibling_uses(text: &str, folder: &str, siblings: &[String]) -> Vec<String> {
    let full = format!("crate::{}::", folder.replace('/', "::"));
    let mut names = Vec::new();
    for prefix in ["super::", full.as_str()] {
        for (at, _) in text.match_indices(prefix) {
            let rest = &text[at + prefix.len()..];
            let group = match rest.strip_prefix('{') {
                Some(inner) => &inner[..inner.find('}').unwrap_or(inner.len())],
                None => rest,
            };
            for item in group.split(',') {
                let name: String = (item.trim().chars())
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if siblings.contains(&name) && !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// A circle of `uses` (file name -> the sibling names it uses), if there is one.
fn find_circle(uses: &std::collections::BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        name: &str,
        uses: &std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| p == name) {
            let mut circle = path[start..].to_vec();
            circle.push(name.to_string());
            return Some(circle);
        }
        if !done.insert(name.to_string()) {
            return None;
        }
        path.push(name.to_string());
        for next in uses.get(name).into_iter().flatten() {
            if let Some(circle) = visit(next, uses, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = std::collections::BTreeSet::new();
    uses.keys()
        .find_map(|name| visit(name, uses, &mut Vec::new(), &mut done))
}

/// Every import circle among the files of one folder under `root` (sim, mocker, report
/// and their subfolders), as `folder: a -> b -> a`.
fn import_circles(files: &[SourceFile], root: &str) -> Vec<String> {
    let mut folders: Vec<String> = (files.iter())
        .filter(|f| in_module(&f.rel, root))
        .filter_map(|f| f.rel.rsplit_once('/').map(|(dir, _)| dir.to_string()))
        .collect();
    folders.sort();
    folders.dedup();
    let mut circles = Vec::new();
    for folder in folders {
        let in_folder = |f: &&SourceFile| {
            f.rel
                .rsplit_once('/')
                .is_some_and(|(dir, name)| dir == folder && name != "mod.rs")
                && !is_test_file(&f.rel)
        };
        let name_of = |f: &SourceFile| {
            let file = f.rel.rsplit('/').next().unwrap_or(&f.rel);
            file.trim_end_matches(".rs").to_string()
        };
        let siblings: Vec<String> = files.iter().filter(in_folder).map(name_of).collect();
        let uses = (files.iter().filter(in_folder))
            .map(|f| {
                // A doc link names a module without using it.
                let code: Vec<&str> = (f.code_lines().map(|(_, line)| line))
                    .filter(|line| !line.trim_start().starts_with("//"))
                    .collect();
                let used = sibling_uses(&code.join("\n"), &folder, &siblings);
                (
                    name_of(f),
                    used.into_iter().filter(|u| *u != name_of(f)).collect(),
                )
            })
            .collect();
        if let Some(circle) = find_circle(&uses) {
            circles.push(format!("{folder}: {}", circle.join(" -> ")));
        }
    }
    circles
}

#[test]
fn no_module_has_an_import_circle_among_its_files() {
    let files = read_sources();
    let circles: Vec<String> = (NO_CIRCLES_IN.iter())
        .flat_map(|root| import_circles(&files, root))
        .collect();
    assert!(
        circles.is_empty(),
        "files that use each other in a circle (put what both need in a lower file):\n{}",
        circles.join("\n")
    );
}

#[test]
fn an_import_circle_is_found_and_a_chain_is_not() {
    let siblings = [
        "fleet".to_string(),
        "ledger".to_string(),
        "routers".to_string(),
    ];
    assert_eq!(
        sibling_uses(
            "use super::fleet::WorkerFleet;\nuse super::{ledger::Ledger, Status};\nuse crate::sim::routers::Routers;",
            "sim",
            &siblings
        ),
        ["fleet", "ledger", "routers"]
    );
    let graph = |edges: &[(&str, &str)]| {
        let mut uses = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (from, to) in edges {
            uses.entry(from.to_string())
                .or_default()
                .push(to.to_string());
            uses.entry(to.to_string()).or_default();
        }
        uses
    };
    let chain = graph(&[
        ("event_loop", "serving"),
        ("serving", "handoff"),
        ("handoff", "effects"),
    ]);
    assert_eq!(find_circle(&chain), None);
    let circle = graph(&[
        ("traits", "worker"),
        ("worker", "protocol"),
        ("protocol", "traits"),
    ]);
    assert_eq!(
        find_circle(&circle).unwrap(),
        ["protocol", "traits", "worker", "protocol"]
    );
}

/// The files docs/architecture.md's section `heading` lists as what the change touches: each
/// numbered item's bold paths, with `placeholder` filled in as `name`.
fn files_the_architecture_names(heading: &str, placeholder: &str, name: &str) -> Vec<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let doc = std::fs::read_to_string(format!("{root}/docs/architecture.md")).unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("docs/architecture.md has no \"{heading}\" section"));
    let items = section.lines().filter(|l| {
        let mut chars = l.chars();
        chars.next().is_some_and(|c| c.is_ascii_digit()) && l.contains(". **`")
    });
    // The bold span of each item: every path quoted in it.
    let bold = |item: &str| item.split("**").nth(1).unwrap_or_default().to_string();
    items
        .map(bold)
        .flat_map(|span| {
            let quoted = span.split('`').skip(1).step_by(2);
            quoted.map(|path| path.to_string()).collect::<Vec<_>>()
        })
        .map(|path| path.replace(placeholder, name))
        .collect()
}

/// Whether `rel` (under src/) is one of `named` (files, or folders ending in `/`).
fn is_named(rel: &str, named: &[String]) -> bool {
    let path = format!("src/{rel}");
    named
        .iter()
        .any(|n| path == *n || (n.ends_with('/') && path.starts_with(n.as_str())))
}

/// The scratch kind of docs/architecture.md's "Adding a worker kind", and what names it.
const SCRATCH_KIND: (&str, [&str; 3]) = (
    "fixed_latency",
    ["fixed_latency", "FixedLatency", "FixedLatencyArgs"],
);

#[test]
fn the_scratch_kind_lives_only_in_the_files_adding_a_kind_touches() {
    let (name, words) = SCRATCH_KIND;
    let named = files_the_architecture_names("Adding a worker kind", "<kind>", name);
    assert!(
        named.contains(&"src/mocker/kind.rs".to_string()) && named.len() <= 5,
        "the section names: {named:?}"
    );
    let files = read_sources();
    let mentions: Vec<String> = files
        .iter()
        .filter(|f| !is_test_file(&f.rel) && !is_named(&f.rel, &named))
        .flat_map(|f| {
            let found = f.code_lines().filter(|(_, line)| {
                !line.trim_start().starts_with("//") && words.iter().any(|w| line.contains(w))
            });
            found
                .map(|(n, line)| format!("src/{}:{n}: {}", f.rel, line.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        mentions.is_empty(),
        "the scratch kind `{name}` reaches beyond what \"Adding a worker kind\" lists \
         ({named:?}):\n{}",
        mentions.join("\n")
    );
    assert!(
        files
            .iter()
            .any(|f| f.rel == format!("mocker/kind/{name}.rs")),
        "the scratch kind is gone: update SCRATCH_KIND"
    );
}

#[test]
fn the_files_a_section_names_are_read_from_its_numbered_items() {
    let named = files_the_architecture_names("Adding a timing model", "<model>", "hardware");
    assert_eq!(
        named,
        [
            "src/mocker/timing_source/hardware.rs",
            "src/mocker/timing_source.rs",
            "src/mocker/config.rs",
            "src/report/render/run_inputs.rs",
        ]
    );
    let kind = files_the_architecture_names("Adding a worker kind", "<kind>", "x");
    assert_eq!(kind[..2], ["src/mocker/kind/x.rs", "src/mocker/kind/x/"]);
    let folders = ["src/mocker/kind/x/".to_string()];
    assert!(is_named("mocker/kind/x/worker.rs", &folders));
    assert!(!is_named("mocker/kind/xy.rs", &folders));
}
