//! Incremental views' commits (S2Graph's transaction log): what changed in
//! each input since the last commit, found from manifests of its files; the
//! marker published inside the view's output; and the log's records made
//! from it.
//!
//! The commit is exactly as durable as the output it describes because it
//! is *in* the output: the marker (`.trellis-txlog.json`: generation,
//! version and schema checksums, and per input its commit id and manifest)
//! is written into the staging directory and published with the data in
//! one rename. The metastore's log is written after, with the view's
//! record; a crash between the two leaves a marker one generation ahead of
//! the log, which `reconcile` adopts at open and a run would adopt anyway,
//! since the next run reads the previous output's own marker. So after a
//! crash at any point each input file is in the published output exactly
//! once: before the publish neither data nor marker changed; after it both
//! did. A reset cannot touch published data: it records in the log's head
//! the generation up to which markers are void.
//!
//! Invariant: it reads inputs and the view's output, writes only into a
//! staging directory; what it returns for the metastore is plain records.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::metastore::{CommitType, NewEvent, TxEntry, TxHead, TxLogChange, TxWrite};
use crate::model::ViewState;
use crate::runtime::{Increment, InputDelta};
use crate::storage::{Staged, ViewStore, Walk};

/// The marker's name inside a view's output: hidden, so that no reader of
/// the data takes it for data.
pub const MARKER: &str = ".trellis-txlog.json";
const MARKER_FORMAT: u32 = 1;

/// One data file of an input, as its manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    /// Relative to the input's directory, `/`-separated.
    pub name: String,
    pub size: u64,
    pub mtime_nanos: i64,
    /// A file replaced by rename within the clock's tick, with the same
    /// size, is still another file.
    #[serde(default)]
    pub inode: u64,
}

/// One input as a commit recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkedInput {
    pub source: String,
    /// The input view's URL path.
    pub input: String,
    /// Its data path relative to the storage root.
    pub path: String,
    pub commit_id: String,
    pub commit_type: CommitType,
    pub manifest: Vec<FileStamp>,
}

/// What a view's published output says of the commit that made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub format: u32,
    pub view: String,
    pub project: String,
    pub generation: u64,
    /// The type's version checksum and schema checksum when it was made.
    pub version: String,
    pub schema: String,
    /// Milliseconds since the Unix epoch.
    pub time: i64,
    /// Why it read everything, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<String>,
    /// Files new or changed that it read.
    #[serde(default)]
    pub new_files: usize,
    pub inputs: Vec<MarkedInput>,
}

/// The marker of the output at `data_path`, if there is one that reads.
pub fn read_marker(storage: &dyn ViewStore, data_path: &Path) -> Option<Marker> {
    let bytes = storage.read(&storage.key(data_path).join(MARKER)).ok()??;
    match serde_json::from_slice::<Marker>(&bytes) {
        Ok(marker) if marker.format == MARKER_FORMAT => Some(marker),
        _ => {
            tracing::warn!(path = %data_path.display(), "unreadable {MARKER}; the next run reads everything");
            None
        }
    }
}

/// Whether a file holds data, as the SDK decides it: done flags and other
/// `_` files, and hidden files, are bookkeeping.
fn is_data_file(name: &str) -> bool {
    !(name.starts_with('_') || name.starts_with('.'))
}

/// The manifest of an input: its data files, recursively, sorted by name,
/// links followed, as the SDK's walk does.
pub fn manifest(storage: &dyn ViewStore, dir: &Path) -> io::Result<Vec<FileStamp>> {
    let walk = Walk {
        follow_links: true,
        exact_names: true,
        keep: &|name| is_data_file(name.rsplit('/').next().unwrap_or(name)),
    };
    let mut found: Vec<FileStamp> = storage
        .list(&storage.key(dir), &walk)?
        .into_iter()
        .filter(|entry| !entry.is_dir)
        .map(|entry| FileStamp {
            name: entry.name,
            size: entry.identity.size,
            mtime_nanos: entry.identity.mtime_nanos,
            inode: entry.identity.inode,
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// A manifest's commit id: a short hash of every entry.
pub fn manifest_id(manifest: &[FileStamp]) -> String {
    let mut hasher = blake3::Hasher::new();
    for stamp in manifest {
        hasher.update(stamp.name.as_bytes());
        hasher.update(&[0]);
        hasher.update(&stamp.size.to_le_bytes());
        hasher.update(&stamp.mtime_nanos.to_le_bytes());
        hasher.update(&stamp.inode.to_le_bytes());
    }
    hasher.finalize().to_hex()[..32].to_string()
}

/// New, changed and removed files between two sorted manifests.
pub fn compare(previous: &[FileStamp], now: &[FileStamp]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut new, mut changed, mut removed) = (Vec::new(), Vec::new(), Vec::new());
    let (mut p, mut n) = (previous.iter().peekable(), now.iter().peekable());
    loop {
        match (p.peek(), n.peek()) {
            (None, None) => break,
            (Some(old), None) => {
                removed.push(old.name.clone());
                p.next();
            }
            (None, Some(current)) => {
                new.push(current.name.clone());
                n.next();
            }
            (Some(old), Some(current)) => match old.name.cmp(&current.name) {
                std::cmp::Ordering::Less => {
                    removed.push(old.name.clone());
                    p.next();
                }
                std::cmp::Ordering::Greater => {
                    new.push(current.name.clone());
                    n.next();
                }
                std::cmp::Ordering::Equal => {
                    if old != current {
                        changed.push(current.name.clone());
                    }
                    p.next();
                    n.next();
                }
            },
        }
    }
    (new, changed, removed)
}

/// One input of an incremental view's transformation, as the loop knows it.
#[derive(Debug, Clone)]
pub struct InputSpec {
    pub source: String,
    pub input: String,
    pub dir: PathBuf,
    /// Relative to the storage root.
    pub path: String,
    pub incremental: bool,
}

/// What the loop knows when it starts an incremental view's transformation.
#[derive(Debug, Clone)]
pub struct Spec {
    pub view: String,
    pub project: String,
    pub data_path: PathBuf,
    pub head: TxHead,
    pub version: String,
    pub schema: String,
    pub full_refresh: bool,
    /// One per input of the request, in its order.
    pub inputs: Vec<InputSpec>,
}

/// What preparing found: the plugin's increment, and what a commit records.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub increment: Increment,
    /// Per input of the request: its manifest, for incremental inputs.
    manifests: Vec<Option<Vec<FileStamp>>>,
    generation: u64,
    new_files: usize,
}

impl Prepared {
    /// Files new or changed that the call reads incrementally.
    pub fn new_files(&self) -> usize {
        self.new_files
    }
}

/// Why a view's next run reads everything, given its previous marker.
fn full_reason(spec: &Spec, marker: Option<&Marker>) -> Option<String> {
    let reason = match marker {
        _ if spec.full_refresh => "full refresh",
        None => "first run",
        Some(marker) if marker.view != spec.view => "the previous output is another view's",
        Some(marker) if marker.generation <= spec.head.reset_through => "reset",
        Some(marker) if marker.schema != spec.schema => "schema changed",
        Some(marker) if marker.version != spec.version => "version changed",
        Some(_) => return None,
    };
    Some(reason.to_string())
}

/// Works out, from the view's published marker and its inputs' manifests,
/// what changed since the last commit: the manifest check.
pub fn prepare(storage: &dyn ViewStore, spec: &Spec) -> io::Result<Prepared> {
    let marker = read_marker(storage, &spec.data_path);
    let full = full_reason(spec, marker.as_ref());
    let marked = marker.as_ref().map_or(0, |m| m.generation);
    let resets = spec.head.reset_sources.values().copied().max().unwrap_or(0);
    let generation = marked.max(spec.head.generation).max(spec.head.reset_through).max(resets) + 1;
    // A source reset through the marker's generation is read again.
    let reset = |marked_input: &MarkedInput| {
        spec.head.reset_sources.get(&marked_input.source).is_some_and(|&through| marked <= through)
    };
    let previous: HashMap<&str, &MarkedInput> = match (&full, &marker) {
        (None, Some(marker)) => marker.inputs.iter().map(|input| (input.input.as_str(), input)).collect(),
        _ => HashMap::new(),
    };
    let (mut deltas, mut manifests, mut new_files) = (Vec::new(), Vec::new(), 0);
    for input in &spec.inputs {
        if !input.incremental {
            deltas.push(InputDelta::default());
            manifests.push(None);
            continue;
        }
        let now = manifest(storage, &input.dir)?;
        let delta = match previous.get(input.input.as_str()) {
            Some(marked) if !reset(marked) => {
                let (new, changed, removed) = compare(&marked.manifest, &now);
                InputDelta {
                    incremental: true,
                    last_commit: Some(marked.commit_id.clone()),
                    new_files: new,
                    changed_files: changed,
                    removed_files: removed,
                }
            }
            // Reset by source: its files are in the previous output, so
            // they count as changed, not new.
            Some(_) => InputDelta {
                incremental: true,
                changed_files: now.iter().map(|stamp| stamp.name.clone()).collect(),
                ..InputDelta::default()
            },
            None => InputDelta {
                incremental: true,
                new_files: now.iter().map(|stamp| stamp.name.clone()).collect(),
                ..InputDelta::default()
            },
        };
        new_files += delta.new_files.len() + delta.changed_files.len();
        deltas.push(delta);
        manifests.push(Some(now));
    }
    let removed_inputs = previous
        .keys()
        .filter(|view| !spec.inputs.iter().any(|input| input.incremental && input.input == **view))
        .map(|view| view.to_string())
        .collect();
    let previous_output = full.is_none().then(|| spec.data_path.clone());
    Ok(Prepared {
        increment: Increment { deltas, previous_output, full_reason: full, removed_inputs },
        manifests,
        generation,
        new_files,
    })
}

/// The marker of a successful call, written into its staging directory,
/// which is about to be published: the plugin's offsets where it gave them,
/// else each input's manifest hash.
pub fn write_marker(
    spec: &Spec,
    prepared: Prepared,
    commits: &[(String, String)],
    staging: &Staged,
    now: i64,
) -> io::Result<Marker> {
    let offsets: HashMap<&str, &str> = commits.iter().map(|(view, id)| (view.as_str(), id.as_str())).collect();
    let inputs = spec
        .inputs
        .iter()
        .zip(prepared.manifests)
        .filter_map(|(input, manifest)| {
            let manifest = manifest?;
            let (commit_id, commit_type) = match offsets.get(input.input.as_str()) {
                Some(offset) => (offset.to_string(), CommitType::Plugin),
                None => (manifest_id(&manifest), CommitType::Manifest),
            };
            Some(MarkedInput {
                source: input.source.clone(),
                input: input.input.clone(),
                path: input.path.clone(),
                commit_id,
                commit_type,
                manifest,
            })
        })
        .collect();
    let marker = Marker {
        format: MARKER_FORMAT,
        view: spec.view.clone(),
        project: spec.project.clone(),
        generation: prepared.generation,
        version: spec.version.clone(),
        schema: spec.schema.clone(),
        time: now,
        full: prepared.increment.full_reason,
        new_files: prepared.new_files,
        inputs,
    };
    let bytes = serde_json::to_vec(&marker).map_err(io::Error::other)?;
    // Whatever the plugin left under this name is replaced: the marker is the host's.
    staging.put(MARKER, &bytes)?;
    Ok(marker)
}

/// The log's records of a published marker: the head moves to its
/// generation (resets kept), its inputs become the entries, and entries of
/// inputs it no longer has are removed.
pub fn write_of(marker: &Marker, head: Option<TxHead>, existing: &[TxEntry], data_path: &Path) -> TxWrite {
    let mut head = head.unwrap_or_default();
    head.generation = marker.generation;
    head.output = data_path.to_string_lossy().into_owned();
    let entries: Vec<TxEntry> = marker
        .inputs
        .iter()
        .map(|input| TxEntry {
            project: marker.project.clone(),
            source: input.source.clone(),
            path: input.path.clone(),
            input: input.input.clone(),
            commit_id: input.commit_id.clone(),
            commit_type: input.commit_type,
            time: marker.time,
            enabled: true,
            generation: marker.generation,
        })
        .collect();
    let removed = existing
        .iter()
        .filter(|old| !entries.iter().any(|new| new.source == old.source && new.path == old.path))
        .map(|old| (old.source.clone(), old.path.clone()))
        .collect();
    TxWrite { view: marker.view.clone(), head, entries, removed }
}

/// A reset of a view's log, whole or of one source: entries disabled, and
/// the head voiding every marker up to the newest generation there is.
pub fn reset_of(
    storage: &dyn ViewStore,
    view: &str,
    head: Option<TxHead>,
    existing: Vec<TxEntry>,
    data_path: &Path,
    source: Option<&str>,
) -> TxWrite {
    let mut head = head.unwrap_or_default();
    let through = head.generation.max(read_marker(storage, data_path).map_or(0, |m| m.generation));
    match source {
        None => head.reset_through = head.reset_through.max(through),
        Some(source) => {
            let entry = head.reset_sources.entry(source.to_string()).or_default();
            *entry = (*entry).max(through);
        }
    }
    if head.output.is_empty() {
        head.output = data_path.to_string_lossy().into_owned();
    }
    let entries = existing
        .into_iter()
        .filter(|entry| source.is_none_or(|source| entry.source == source))
        .map(|entry| TxEntry { enabled: false, ..entry })
        .collect();
    TxWrite { view: view.to_string(), head, entries, removed: Vec::new() }
}

/// The event that records a change of a view's log.
pub fn event(
    view: &std::sync::Arc<str>,
    state: ViewState,
    change: TxLogChange,
    run: Option<&std::sync::Arc<str>>,
    time: i64,
) -> NewEvent {
    NewEvent {
        view: view.clone(),
        previous: state,
        current: state,
        actions: vec![format!("txlog-{}", change.kind).into()],
        time,
        run_id: run.cloned(),
        error: None,
        action: None,
        txlog: Some(change),
        errors: false,
        flow: None,
    }
}

/// The change a marker's commit makes, for its event.
pub fn commit_change(marker: &Marker, kind: &str) -> TxLogChange {
    TxLogChange {
        kind: kind.into(),
        generation: marker.generation,
        inputs: marker.inputs.len(),
        new_files: marker.new_files,
        full: marker.full.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    /// Every way a view's previous marker can stand against what the view
    /// is now, and whether its next run merges or reads everything.
    #[test]
    fn when_a_run_reads_everything() {
        let spec = |full_refresh: bool, reset_through: u64| Spec {
            view: "v".into(),
            project: "p".into(),
            data_path: PathBuf::new(),
            head: TxHead { generation: 2, reset_through, ..TxHead::default() },
            version: "v1".into(),
            schema: "s1".into(),
            full_refresh,
            inputs: Vec::new(),
        };
        let marker = |view: &str, generation: u64, schema: &str, version: &str| Marker {
            format: MARKER_FORMAT,
            view: view.into(),
            project: "p".into(),
            generation,
            version: version.into(),
            schema: schema.into(),
            time: 0,
            full: None,
            new_files: 0,
            inputs: Vec::new(),
        };
        let cases = [
            ("no marker", spec(false, 0), None),
            ("marker of this view, as it is", spec(false, 0), Some(marker("v", 2, "s1", "v1"))),
            ("a newer marker (a crash before the log's commit)", spec(false, 0), Some(marker("v", 3, "s1", "v1"))),
            ("full refresh", spec(true, 0), Some(marker("v", 2, "s1", "v1"))),
            ("another view's marker", spec(false, 0), Some(marker("w", 2, "s1", "v1"))),
            ("reset through its generation", spec(false, 2), Some(marker("v", 2, "s1", "v1"))),
            ("reset before a newer commit", spec(false, 1), Some(marker("v", 2, "s1", "v1"))),
            ("another schema", spec(false, 0), Some(marker("v", 2, "s0", "v1"))),
            ("another version", spec(false, 0), Some(marker("v", 2, "s1", "v0"))),
            ("another schema and version", spec(false, 0), Some(marker("v", 2, "s0", "v0"))),
        ];
        let table: String = cases
            .iter()
            .map(|(case, spec, marker)| {
                let reason = full_reason(spec, marker.as_ref()).unwrap_or_else(|| "merge".into());
                format!("{case:<50} {reason}\n")
            })
            .collect();
        expect![[r#"
            no marker                                          first run
            marker of this view, as it is                      merge
            a newer marker (a crash before the log's commit)   merge
            full refresh                                       full refresh
            another view's marker                              the previous output is another view's
            reset through its generation                       reset
            reset before a newer commit                        merge
            another schema                                     schema changed
            another version                                    version changed
            another schema and version                         schema changed
        "#]]
        .assert_eq(&table);
    }

    fn stamp(name: &str, size: u64, mtime_nanos: i64) -> FileStamp {
        FileStamp { name: name.into(), size, mtime_nanos, inode: 1 }
    }

    #[test]
    fn comparing_manifests_finds_new_changed_and_removed_files() {
        let before = [stamp("a", 1, 1), stamp("b", 1, 1), stamp("c", 1, 1)];
        let after = [stamp("a", 1, 1), stamp("b", 2, 1), stamp("d", 1, 1)];
        let (new, changed, removed) = compare(&before, &after);
        assert_eq!((new, changed, removed), (vec!["d".to_string()], vec!["b".to_string()], vec!["c".to_string()]));
        assert_eq!(compare(&after, &after), (vec![], vec![], vec![]));
        assert_ne!(manifest_id(&before), manifest_id(&after));
    }

    #[test]
    fn a_manifest_lists_data_files_recursively_and_skips_bookkeeping() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub")).unwrap();
        for name in ["b.csv", "sub/a.csv", "_SUCCESS", ".hidden", "sub/_tmp"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        // Links are followed, to a directory and to a file, as the SDK does.
        std::os::unix::fs::symlink(dir.path().join("sub"), dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("b.csv"), dir.path().join("c.csv")).unwrap();
        let found = manifest(&crate::storage::LocalDir::new(dir.path()), dir.path()).unwrap();
        let names: Vec<&str> = found.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["b.csv", "c.csv", "linked/a.csv", "sub/a.csv"]);
        assert_eq!(found[1].size, 1, "the link's target, not the link");
    }
}
