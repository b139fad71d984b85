//! Proof that a file is routersim's: the size and content hash of every file routersim wrote,
//! as the output marker and a stage's marker record them, and the check that a file on disk
//! is still byte for byte what routersim wrote there.
//!
//! The hash is XXH3's 128-bit variant (`xxh3_128`, the `xxhash-rust` crate, default seed and
//! secret). It guards against accidents and careless edits (a user's file under an output
//! name, a hand-written or copied marker, an output edited after the run), not against an
//! adversary who forges a marker on purpose: such a person can delete the files anyway.

use crate::bounds;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read};
use std::path::Path;
use xxhash_rust::xxh3::{Xxh3Default, xxh3_128};

/// The most a file's check reads at once.
const READ_CHUNK_BYTES: u64 = 64 << 10;

/// What routersim wrote under one name: its length and its content hash.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Proof {
    bytes: u64,
    xxh3_128: u128,
}

/// The files a marker vouches for: each name with the contents routersim may have left there
/// (one, except while a rerun replaces files: then the old and the new).
pub(super) type Proofs = BTreeMap<String, BTreeSet<Proof>>;

/// Why a marker's file list proves nothing.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unproven {
    /// The list of an older routersim: bare names, without sizes or hashes.
    OldFormat,
    /// Not a list routersim writes (a field missing or of the wrong type, a name that is not a
    /// plain file name or is one of routersim's reserved names).
    Malformed,
}

/// The proofs of `files` (name, bytes), a name possibly more than once.
#[cfg(test)]
pub(super) fn proofs_of<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Proofs {
    proofs_from(
        files
            .into_iter()
            .map(|(name, bytes)| (name, Proof::of(bytes))),
    )
}

/// The proofs `files` (name, proof) list, a name possibly more than once.
pub(super) fn proofs_from<'a>(files: impl IntoIterator<Item = (&'a str, Proof)>) -> Proofs {
    let mut proofs = Proofs::new();
    for (name, proof) in files {
        proofs.entry(name.to_string()).or_default().insert(proof);
    }
    proofs
}

/// What a file on disk is, measured against the proofs for its name.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum OnDisk {
    /// Nothing there.
    Absent,
    /// A regular file holding exactly one of the contents routersim wrote.
    Ours(Proof),
    /// Anything else: why it is not routersim's file any more.
    Changed(&'static str),
}

impl Proof {
    /// The proof of contents `bytes` long with hash `xxh3_128` (a streamed file's).
    pub(super) fn from_parts(bytes: u64, xxh3_128: u128) -> Proof {
        Proof { bytes, xxh3_128 }
    }

    /// The proof of `bytes`.
    pub(super) fn of(bytes: &[u8]) -> Proof {
        Proof {
            bytes: bytes.len() as u64,
            xxh3_128: xxh3_128(bytes),
        }
    }

    /// The proof of the regular file at `path` if it is `bytes` long; `None` if it is another
    /// length. Reads at most `bytes + 1` bytes, streamed.
    fn of_file_if_length(path: &Path, bytes: u64) -> io::Result<Option<Proof>> {
        let mut file = bounds::open_regular(path)?.take(bytes.saturating_add(1));
        let mut hasher = Xxh3Default::new();
        // Sized to the file when it is small: a buffer is zeroed whole, and an inspection
        // reads every file of an output twice, most of them a few KB.
        let mut buf = vec![0u8; bytes.saturating_add(1).min(READ_CHUNK_BYTES) as usize];
        let mut read = 0u64;
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    read += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok((read == bytes).then(|| Proof {
            bytes,
            xxh3_128: hasher.digest128(),
        }))
    }
}

/// Measures the entry `path` (a link is not followed: routersim never writes one) against the
/// contents `proofs` allows.
pub(super) fn on_disk(path: &Path, proofs: &BTreeSet<Proof>) -> io::Result<OnDisk> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(OnDisk::Absent),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() {
        return Ok(OnDisk::Changed("it is now a symbolic link"));
    }
    if !meta.is_file() {
        return Ok(OnDisk::Changed("it is no longer a regular file"));
    }
    let candidates: Vec<&Proof> = proofs.iter().filter(|p| p.bytes == meta.len()).collect();
    let Some(first) = candidates.first() else {
        return Ok(OnDisk::Changed("its size changed since routersim wrote it"));
    };
    // Every candidate has this length, so one pass over the file decides.
    match Proof::of_file_if_length(path, first.bytes)? {
        Some(found) if candidates.contains(&&found) => Ok(OnDisk::Ours(found)),
        _ => Ok(OnDisk::Changed(
            "its content changed since routersim wrote it",
        )),
    }
}

/// The `files` list of a marker: one object per (name, content), in a fixed order, so the
/// same files always give the same bytes.
pub(super) fn proofs_json(proofs: &Proofs) -> serde_json::Value {
    let entries: Vec<serde_json::Value> = proofs
        .iter()
        .flat_map(|(name, set)| {
            set.iter().map(move |proof| {
                serde_json::json!({
                    "name": name,
                    "bytes": proof.bytes,
                    "xxh3_128": format!("{:032x}", proof.xxh3_128),
                })
            })
        })
        .collect();
    serde_json::Value::Array(entries)
}

/// Parses a marker's `files` list. `allowed` says which names a list may hold.
pub(super) fn parse_proofs(
    files: &serde_json::Value,
    allowed: impl Fn(&str) -> bool,
) -> Result<Proofs, Unproven> {
    let entries = files.as_array().ok_or(Unproven::Malformed)?;
    if entries.iter().any(serde_json::Value::is_string) {
        return Err(Unproven::OldFormat);
    }
    let mut proofs = Proofs::new();
    for entry in entries {
        let (name, proof) = parse_entry(entry).ok_or(Unproven::Malformed)?;
        if !allowed(name) {
            return Err(Unproven::Malformed);
        }
        proofs.entry(name.to_string()).or_default().insert(proof);
    }
    Ok(proofs)
}

/// One `{"name", "bytes", "xxh3_128"}` object, with nothing else in it.
fn parse_entry(entry: &serde_json::Value) -> Option<(&str, Proof)> {
    let object = entry.as_object()?;
    if object.len() != 3 {
        return None;
    }
    let name = object.get("name")?.as_str()?;
    let bytes = object.get("bytes")?.as_u64()?;
    let hex = object.get("xxh3_128")?.as_str()?;
    let lower_hex = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let xxh3_128 = u128::from_str_radix(hex, 16).ok().filter(|_| lower_hex)?;
    Some((name, Proof { bytes, xxh3_128 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proofs(entries: &[(&'static str, &'static [u8])]) -> Proofs {
        proofs_of(entries.iter().copied())
    }

    #[test]
    fn a_file_is_ours_only_while_it_holds_the_bytes_routersim_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.csv");
        let written = b"id,ttft\n1,2\n".repeat(20_000); // several read buffers long
        fs::write(&path, &written).unwrap();
        let set = BTreeSet::from([Proof::of(&written)]);
        assert_eq!(
            on_disk(&path, &set).unwrap(),
            OnDisk::Ours(Proof::of(&written))
        );
        let mut edited = written.clone();
        edited[100_000] = b'9'; // same length, one byte changed
        fs::write(&path, &edited).unwrap();
        assert!(
            matches!(on_disk(&path, &set).unwrap(), OnDisk::Changed(why) if why.contains("content"))
        );
        fs::write(&path, &written[1..]).unwrap();
        assert!(
            matches!(on_disk(&path, &set).unwrap(), OnDisk::Changed(why) if why.contains("size"))
        );
        fs::remove_file(&path).unwrap();
        assert_eq!(on_disk(&path, &set).unwrap(), OnDisk::Absent);
    }

    #[test]
    fn the_streamed_hash_is_the_one_shot_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for len in [0usize, 1, 240, 65_536, 200_001] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            fs::write(&path, &bytes).unwrap();
            let streamed = Proof::of_file_if_length(&path, len as u64).unwrap();
            assert_eq!(streamed, Some(Proof::of(&bytes)), "{len} bytes");
        }
    }

    #[test]
    fn a_file_longer_or_shorter_than_asked_has_no_proof() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for len in [0usize, 240, 70_000] {
            fs::write(&path, vec![7u8; len]).unwrap();
            for asked in [len.saturating_sub(1), len + 1] {
                if asked == len {
                    continue;
                }
                let proof = Proof::of_file_if_length(&path, asked as u64).unwrap();
                assert_eq!(proof, None, "{len} bytes read as {asked}");
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_link_or_a_directory_under_a_listed_name_is_not_ours() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let set = BTreeSet::from([Proof::of(b"x")]);
        assert!(
            matches!(on_disk(&link, &set).unwrap(), OnDisk::Changed(why) if why.contains("link"))
        );
        assert!(matches!(
            on_disk(dir.path(), &set).unwrap(),
            OnDisk::Changed(_)
        ));
    }

    #[test]
    fn either_of_two_listed_contents_is_ours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let both = proofs(&[("f", b"old"), ("f", b"newer")]);
        for bytes in [&b"old"[..], b"newer"] {
            fs::write(&path, bytes).unwrap();
            assert_eq!(
                on_disk(&path, &both["f"]).unwrap(),
                OnDisk::Ours(Proof::of(bytes))
            );
        }
        fs::write(&path, b"new").unwrap();
        assert!(matches!(
            on_disk(&path, &both["f"]).unwrap(),
            OnDisk::Changed(_)
        ));
    }

    #[test]
    fn proofs_round_trip_through_json_in_a_fixed_order() {
        let written = proofs(&[("b.csv", b"2"), ("a.csv", b"1"), ("a.csv", b"one")]);
        let json = proofs_json(&written);
        assert_eq!(parse_proofs(&json, |_| true), Ok(written.clone()));
        let names: Vec<&str> = json
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a.csv", "a.csv", "b.csv"]);
        assert_eq!(json[2]["xxh3_128"].as_str().unwrap().len(), 32);
    }

    #[test]
    fn bare_names_are_the_old_format_and_anything_else_is_malformed() {
        let old = serde_json::json!(["notes.txt"]);
        assert_eq!(parse_proofs(&old, |_| true), Err(Unproven::OldFormat));
        let good = serde_json::json!({"name": "a", "bytes": 1, "xxh3_128": "0".repeat(32)});
        assert!(parse_proofs(&serde_json::json!([good]), |_| true).is_ok());
        assert_eq!(
            parse_proofs(&serde_json::json!([good]), |n| n != "a"),
            Err(Unproven::Malformed),
            "a name the caller does not allow"
        );
        for bad in [
            serde_json::json!({"name": "a", "bytes": 1}),
            serde_json::json!({"name": "a", "bytes": -1, "xxh3_128": "0".repeat(32)}),
            serde_json::json!({"name": "a", "bytes": 1, "xxh3_128": "0".repeat(31)}),
            serde_json::json!({"name": "a", "bytes": 1, "xxh3_128": "A".repeat(32)}),
            serde_json::json!({"name": "a", "bytes": 1, "xxh3_128": "0".repeat(32), "x": 1}),
            serde_json::json!(7),
        ] {
            assert_eq!(
                parse_proofs(&serde_json::json!([bad]), |_| true),
                Err(Unproven::Malformed),
                "{bad}"
            );
        }
        assert_eq!(
            parse_proofs(&serde_json::json!({}), |_| true),
            Err(Unproven::Malformed)
        );
    }
}
