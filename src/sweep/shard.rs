//! What a sweep is (`sweep.json`), shard directories, and reading them back for the merge.
//!
//! A shard directory holds `sweep.json` (the manifest with its `shard`) and `sweep.csv` (its
//! points' rows). [`read_shards`] checks that the shards belong to one sweep and cover every
//! run exactly once, so the merged files equal an unsharded sweep's byte for byte.

use super::grid::{self, MAX_POINTS};
use super::grid::{Grid, ShardSpec};
use super::run::Row;
use super::shard_check::{self, RowSource};
use super::table;
use crate::bounds::{self, MAX_INPUT_FILE_BYTES, MAX_REQUESTS};
use crate::pipeline::RunError;
use crate::scheduling::policy::{IDENTIFIER_RULE, is_identifier};
use crate::time::MAX_INPUT_NS;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Everything that defines a sweep's output besides its runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`Manifest::FORMAT`].
    pub format: String,
    /// The scenario's name.
    pub scenario: String,
    /// The scenario file's source hash (without overrides): shards of different files do
    /// not merge.
    pub source_hash: String,
    /// The axes.
    pub grid: Grid,
    /// Seeds per point.
    pub replications: u32,
    /// The seeded arrival jitter bound, ns.
    pub arrival_jitter_ns: u64,
    /// The first-N share's N, if fixed by `--prefix-n`.
    pub prefix_n: Option<u64>,
    /// The class names, in class order.
    pub class_names: Vec<String>,
    /// The shard this directory holds (`None` for a whole sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardSpec>,
}

impl Manifest {
    /// The format tag of `sweep.json`.
    pub const FORMAT: &'static str = "routersim-sweep/1";

    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a manifest always serialises");
        bytes.push(b'\n');
        bytes
    }

    /// Parses `sweep.json` bytes (`source` names the file in errors).
    pub fn from_json(bytes: &[u8], source: &str) -> Result<Manifest, RunError> {
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| RunError::Input(format!("{source}: not a sweep manifest: {e}")))?;
        if manifest.format != Self::FORMAT {
            return Err(RunError::Input(format!(
                "{source}: format {:?}, expected {:?}",
                manifest.format,
                Self::FORMAT
            )));
        }
        manifest
            .grid
            .check()
            .map_err(|e| RunError::Input(format!("{source}: field `grid`: {e}")))?;
        super::grid::check_run_count(manifest.grid.point_count(), manifest.replications)
            .map_err(|e| RunError::Input(format!("{source}: {e}")))?;
        manifest
            .check_fields()
            .map_err(|what| RunError::Input(format!("{source}: {what}")))?;
        Ok(manifest)
    }

    /// The fields a sweep of this manifest could have written: at least one replication and
    /// one class, a shard that is one of its N, and the jitter and first-N within their
    /// bounds.
    fn check_fields(&self) -> Result<(), String> {
        if self.replications == 0 {
            return Err("field `replications`: 0, a sweep runs at least 1".into());
        }
        if self.class_names.is_empty() {
            return Err("field `class_names`: empty, a sweep has at least one class".into());
        }
        self.check_names()?;
        if let Some(spec) = self.shard
            && (spec.index == 0 || spec.index > spec.count || spec.count > MAX_POINTS)
        {
            return Err(format!(
                "field `shard`: {}/{} is not shard K of N with 1 <= K <= N <= {MAX_POINTS}",
                spec.index, spec.count
            ));
        }
        if self.arrival_jitter_ns > MAX_INPUT_NS {
            return Err(format!(
                "field `arrival_jitter_ns`: {} is more than {MAX_INPUT_NS} ns",
                self.arrival_jitter_ns
            ));
        }
        match self.prefix_n {
            Some(n) if n > MAX_REQUESTS => Err(format!(
                "field `prefix_n`: {n} is more than the {MAX_REQUESTS} requests a run may have"
            )),
            _ => Ok(()),
        }
    }
}

impl Manifest {
    /// The names a sweep takes from its scenario, as the scenario's validation admits them:
    /// class names are policy identifiers, each once, and axis paths are field paths
    /// ([`grid::check_path`]). They name files and columns, so nothing else is written.
    fn check_names(&self) -> Result<(), String> {
        for (i, name) in self.class_names.iter().enumerate() {
            if !is_identifier(name) {
                return Err(format!(
                    "field `class_names[{i}]`: `{}` is not a class name: it {IDENTIFIER_RULE}",
                    name.escape_debug()
                ));
            }
            if self.class_names[..i].contains(name) {
                return Err(format!(
                    "field `class_names[{i}]`: class `{name}` is given twice"
                ));
            }
        }
        for (i, axis) in self.grid.axes.iter().enumerate() {
            grid::check_path(&axis.path)
                .map_err(|why| format!("field `grid.axes[{i}].path`: {why}"))?;
        }
        Ok(())
    }
}

/// The files of one shard: `sweep.json` (with its shard) and its rows in `sweep.csv`.
pub fn shard_files(manifest: &Manifest, rows: &[Row]) -> Vec<(String, Vec<u8>)> {
    vec![
        ("sweep.json".to_string(), manifest.to_json()),
        ("sweep.csv".to_string(), table::rows_csv(manifest, rows)),
    ]
}

/// Reads shard directories into the whole sweep's manifest (without shard) and its rows
/// sorted by (point, replication). Errors (exit 2) if they are not all N shards of one sweep,
/// do not hold every run exactly once, or hold a value no sweep of their manifest writes
/// ([`shard_check`]).
pub fn read_shards(dirs: &[PathBuf]) -> Result<(Manifest, Vec<Row>), RunError> {
    let mut shards = Vec::new();
    for dir in dirs {
        shards.push(read_shard(dir)?);
    }
    let Some((first, _)) = shards.first() else {
        return Err(RunError::Input("merge: no shard directories given".into()));
    };
    let whole = Manifest {
        shard: None,
        ..first.clone()
    };
    check_one_sweep(&whole, &shards, dirs)?;
    let mut runs: Vec<(Row, RowSource)> = shards.into_iter().flat_map(|(_, rows)| rows).collect();
    runs.sort_by_key(|(r, _)| (r.point, r.replication));
    check_complete(&whole, &runs)?;
    shard_check::check_seeds(&whole, &runs)?;
    Ok((whole, runs.into_iter().map(|(row, _)| row).collect()))
}

/// Every shard is one of the same N shards of `whole`, each given once, none missing.
fn check_one_sweep(
    whole: &Manifest,
    shards: &[(Manifest, Vec<(Row, RowSource)>)],
    dirs: &[PathBuf],
) -> Result<(), RunError> {
    let count = shards[0].0.shard.map_or(0, |s| s.count);
    let mut seen = vec![false; count];
    for ((manifest, _), dir) in shards.iter().zip(dirs) {
        let spec = manifest.shard.expect("read_shard checked");
        if (Manifest {
            shard: None,
            ..manifest.clone()
        }) != *whole
            || spec.count != count
        {
            return Err(RunError::Input(format!(
                "{}: a shard of a different sweep than {}",
                dir.display(),
                dirs[0].display()
            )));
        }
        if std::mem::replace(&mut seen[spec.index - 1], true) {
            return Err(RunError::Input(format!(
                "{}: shard {}/{count} given twice",
                dir.display(),
                spec.index
            )));
        }
    }
    match seen.iter().position(|s| !s) {
        Some(missing) => Err(RunError::Input(format!(
            "merge: shard {}/{count} is missing",
            missing + 1
        ))),
        None => Ok(()),
    }
}

/// Reads one shard directory: its manifest through [`MAX_INPUT_FILE_BYTES`], its rows
/// through the most its manifest allows ([`shard_check::max_rows_csv_bytes`]), each row
/// checked ([`shard_check::check_row`]) and in the shard's points.
fn read_shard(dir: &Path) -> Result<(Manifest, Vec<(Row, RowSource)>), RunError> {
    let unreadable = |path: &Path, e: std::io::Error| {
        RunError::Input(format!("{}: cannot read: {e}", path.display()))
    };
    let json_path = dir.join("sweep.json");
    let json_name = json_path.display().to_string();
    let json = bounds::read_bytes_capped(&json_path, MAX_INPUT_FILE_BYTES)
        .map_err(|e| unreadable(&json_path, e))?;
    let manifest = Manifest::from_json(&json, &json_name)?;
    let Some(spec) = manifest.shard else {
        return Err(RunError::Input(format!(
            "{json_name}: not a shard (no \"shard\")"
        )));
    };
    let runs = shard_runs(&manifest, spec);
    let csv_path = dir.join("sweep.csv");
    let file = name_of(&csv_path);
    let cap_bytes = shard_check::max_rows_csv_bytes(&manifest, runs);
    let mut input =
        bounds::open_capped(&csv_path, cap_bytes).map_err(|e| unreadable(&csv_path, e))?;
    let parsed = table::parse_rows_csv(&manifest, &mut input, &file, runs);
    if input.limit() == 0 {
        // It grew past the cap while it was read: whatever was parsed is not the file.
        return Err(unreadable(&csv_path, bounds::file_too_large(cap_bytes)));
    }
    let mut rows = Vec::new();
    for (row, line) in parsed? {
        let at = RowSource {
            file: file.clone(),
            line,
        };
        shard_check::check_row(&manifest, &row, &at)?;
        if !spec.contains(row.point) {
            return Err(RunError::Input(format!(
                "{file}:{line}: column `point`: point {} does not belong to shard {}/{}",
                row.point, spec.index, spec.count
            )));
        }
        rows.push((row, at));
    }
    Ok((manifest, rows))
}

fn name_of(path: &Path) -> String {
    path.display().to_string()
}

/// The runs shard `spec` of `manifest` holds: its points times the replications.
fn shard_runs(manifest: &Manifest, spec: ShardSpec) -> usize {
    let points = manifest.grid.point_count();
    let mine = points / spec.count + usize::from(spec.index - 1 < points % spec.count);
    mine * manifest.replications as usize
}

/// Every (point, replication) exactly once. `runs` is sorted by (point, replication), and
/// each row was checked against the manifest, so a gap or a repeat is all that is left.
fn check_complete(manifest: &Manifest, runs: &[(Row, RowSource)]) -> Result<(), RunError> {
    for pair in runs.windows(2) {
        let ((a, at_a), (b, at_b)) = (&pair[0], &pair[1]);
        if (a.point, a.replication) == (b.point, b.replication) {
            return Err(RunError::Input(format!(
                "{}:{}: point {} replication {} is also at {}:{}",
                at_b.file, at_b.line, b.point, b.replication, at_a.file, at_a.line
            )));
        }
    }
    let reps = manifest.replications as usize;
    let expected = manifest.grid.point_count() * reps;
    if runs.len() != expected {
        let missing = (0..expected)
            .find(|&i| {
                runs.get(i)
                    .is_none_or(|(r, _)| (r.point, r.replication as usize) != (i / reps, i % reps))
            })
            .expect("fewer runs than expected, none repeated: one is missing");
        return Err(RunError::Input(format!(
            "merge: {} runs, the sweep has {expected}: point {} replication {} is in no shard",
            runs.len(),
            missing / reps,
            missing % reps
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::table::tests::{manifest, rows};

    fn write_shards(dir: &Path, count: usize) -> Vec<PathBuf> {
        let (m, all) = (manifest(), rows());
        (1..=count)
            .map(|index| {
                let spec = ShardSpec { index, count };
                let shard = Manifest {
                    shard: Some(spec),
                    ..m.clone()
                };
                let mine: Vec<Row> = all
                    .iter()
                    .filter(|r| spec.contains(r.point))
                    .cloned()
                    .collect();
                let out = dir.join(format!("shard{index}"));
                crate::report::output::write_dir(
                    &out,
                    crate::report::output::OutputKind::Sweep,
                    &shard_files(&shard, &mine),
                )
                .unwrap();
                out
            })
            .collect()
    }

    #[test]
    fn manifest_json_round_trips_and_omits_a_missing_shard() {
        let m = manifest();
        let json = m.to_json();
        assert!(!String::from_utf8(json.clone()).unwrap().contains("shard"));
        assert_eq!(Manifest::from_json(&json, "m").unwrap(), m);
        let bad = Manifest::from_json(b"{}", "m.json").unwrap_err();
        assert!(bad.to_string().starts_with("m.json: not a sweep manifest"));
    }

    #[test]
    fn shards_in_any_order_read_back_as_the_whole_sweep() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dirs = write_shards(tmp.path(), 2);
        dirs.reverse();
        let (m, rows_back) = read_shards(&dirs).unwrap();
        assert_eq!(m, manifest());
        assert_eq!(rows_back, rows());
    }

    #[test]
    fn missing_duplicate_or_foreign_shards_are_input_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = write_shards(tmp.path(), 2);
        let missing = read_shards(&dirs[..1]).unwrap_err();
        assert!(
            missing.to_string().contains("shard 2/2 is missing"),
            "{missing}"
        );
        let twice = read_shards(&[dirs[0].clone(), dirs[0].clone()]).unwrap_err();
        assert!(twice.to_string().contains("given twice"), "{twice}");
        let other = tmp.path().join("other");
        let foreign = Manifest {
            replications: 3,
            ..manifest()
        };
        let spec = ShardSpec { index: 2, count: 2 };
        let foreign = Manifest {
            shard: Some(spec),
            ..foreign
        };
        crate::report::output::write_dir(
            &other,
            crate::report::output::OutputKind::Sweep,
            &shard_files(&foreign, &[]),
        )
        .unwrap();
        let mixed = read_shards(&[dirs[0].clone(), other]).unwrap_err();
        assert!(
            mixed.to_string().contains("a shard of a different sweep"),
            "{mixed}"
        );
        let unsharded = tmp.path().join("whole");
        crate::report::output::write_dir(
            &unsharded,
            crate::report::output::OutputKind::Sweep,
            &[("sweep.json", manifest().to_json())],
        )
        .unwrap();
        let whole = read_shards(&[unsharded]).unwrap_err();
        assert!(whole.to_string().contains("not a shard"), "{whole}");
        for e in [missing, twice, mixed, whole] {
            assert!(matches!(e, RunError::Input(_)), "{e}");
        }
    }
}
