//! What a sweep is (`sweep.json`), shard directories, and reading them back for the merge.
//!
//! A shard directory holds `sweep.json` (the manifest with its `shard`) and `sweep.csv` (its
//! points' rows). [`read_shards`] checks that the shards belong to one sweep and cover every
//! run exactly once, so the merged files equal an unsharded sweep's byte for byte.

use super::grid::{Grid, ShardSpec};
use super::run::Row;
use super::table;
use crate::pipeline::RunError;
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
        super::grid::check_run_count(manifest.grid.point_count(), manifest.replications)
            .map_err(|e| RunError::Input(format!("{source}: {e}")))?;
        Ok(manifest)
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
/// sorted by (point, replication). Errors (exit 2) if they are not all N shards of one sweep
/// or do not hold every run exactly once.
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
    let count = first.shard.map_or(0, |s| s.count);
    let mut seen = vec![false; count];
    for ((manifest, _), dir) in shards.iter().zip(dirs) {
        let spec = manifest.shard.expect("read_shard checked");
        if (Manifest {
            shard: None,
            ..manifest.clone()
        }) != whole
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
    if let Some(missing) = seen.iter().position(|s| !s) {
        return Err(RunError::Input(format!(
            "merge: shard {}/{count} is missing",
            missing + 1
        )));
    }
    let mut rows: Vec<Row> = shards.into_iter().flat_map(|(_, rows)| rows).collect();
    rows.sort_by_key(|r| (r.point, r.replication));
    check_complete(&whole, &rows)?;
    Ok((whole, rows))
}

fn read_shard(dir: &Path) -> Result<(Manifest, Vec<Row>), RunError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path)
            .map_err(|e| RunError::Input(format!("{}: cannot read: {e}", path.display())))
            .map(|bytes| (bytes, path.display().to_string()))
    };
    let (json, json_name) = read("sweep.json")?;
    let manifest = Manifest::from_json(&json, &json_name)?;
    let Some(spec) = manifest.shard else {
        return Err(RunError::Input(format!(
            "{json_name}: not a shard (no \"shard\")"
        )));
    };
    let (csv, csv_name) = read("sweep.csv")?;
    let rows = table::parse_rows_csv(&manifest, &csv, &csv_name)?;
    if let Some(stray) = rows.iter().find(|r| !spec.contains(r.point)) {
        return Err(RunError::Input(format!(
            "{csv_name}: point {} does not belong to shard {}/{}",
            stray.point, spec.index, spec.count
        )));
    }
    Ok((manifest, rows))
}

/// Every (point, replication) exactly once, with the point's values.
fn check_complete(manifest: &Manifest, rows: &[Row]) -> Result<(), RunError> {
    let reps = manifest.replications as usize;
    let expected = manifest.grid.point_count() * reps;
    if rows.len() != expected {
        return Err(RunError::Input(format!(
            "merge: {} runs, the sweep has {expected}",
            rows.len()
        )));
    }
    for (i, row) in rows.iter().enumerate() {
        let (point, replication) = (i / reps, (i % reps) as u32);
        if (row.point, row.replication) != (point, replication)
            || row.values != manifest.grid.values(point)
        {
            return Err(RunError::Input(format!(
                "merge: run {i} is point {} replication {}, expected point {point} replication {replication}",
                row.point, row.replication
            )));
        }
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
