//! Compiled components, cached by the blake3 hash of their bytes: in memory
//! for this process, and on disk so that the next process does not compile
//! again. Only files this cache wrote itself are ever deserialized: the
//! directory is private to its owner, and so must each file be.
//! The directory is bounded: past its size limit, the files least recently
//! used (by modification time, which a load refreshes) are removed, since a
//! Python plugin's entry is some 35 MB and every rebuild of one adds another.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use wasmtime::Engine;
use wasmtime::component::Component;

/// Where a component came from, for reports and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Already loaded by this process.
    Memory,
    /// Deserialized from the on-disk cache.
    Disk,
    /// Compiled now.
    Compiled,
}

pub(crate) struct CompileCache {
    memory: Mutex<HashMap<blake3::Hash, Component>>,
    /// `<cache dir>/<engine compatibility>`: artifacts of another wasmtime
    /// version or configuration live in another directory and are never tried.
    disk: Option<PathBuf>,
    /// Most bytes the directory's files may add up to.
    limit: u64,
}

/// The disk cache's size limit unless a runtime sets another: some thirty
/// Python plugins, or thousands of Rust ones.
pub const DEFAULT_CACHE_LIMIT: u64 = 1 << 30;

impl CompileCache {
    pub(crate) fn new(engine: &Engine, dir: Option<&Path>, limit: u64) -> Self {
        let disk = dir.map(|dir| {
            let mut hasher = std::hash::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut hasher);
            env!("CARGO_PKG_VERSION").hash(&mut hasher);
            dir.join(format!("components-{:016x}", hasher.finish()))
        });
        // Cached files are native code that runs unsandboxed: use the disk
        // only if the directory is ours alone.
        let disk = disk.filter(|dir| match make_private(dir) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "not caching compiled plugins on disk: {e}");
                false
            }
        });
        CompileCache { memory: Mutex::new(HashMap::new()), disk, limit }
    }

    /// The component for `bytes`, whose hash is `hash`, compiling it only if
    /// neither cache has it. Blocking: call it off the async executor.
    pub(crate) fn get_or_compile(
        &self,
        engine: &Engine,
        hash: blake3::Hash,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, Provenance)> {
        if let Some(component) = self.lock().get(&hash) {
            return Ok((component.clone(), Provenance::Memory));
        }
        let file = self.disk.as_ref().map(|dir| dir.join(format!("{}.cwasm", hash.to_hex())));
        if let Some(file) = file.as_ref().filter(|file| file.exists()) {
            match load(engine, file) {
                Ok(component) => {
                    // Recently used: the last to be evicted.
                    let _ = std::fs::File::options()
                        .append(true)
                        .open(file)
                        .and_then(|opened| opened.set_modified(std::time::SystemTime::now()));
                    self.lock().insert(hash, component.clone());
                    return Ok((component, Provenance::Disk));
                }
                Err(e) => tracing::warn!(file = %file.display(), "discarding unusable cached component: {e}"),
            }
        }
        let component = Component::new(engine, bytes)?;
        if let Some(file) = &file
            && let Err(e) = store(&component, file)
        {
            // The cache is an optimisation: failing to write it is not an error.
            tracing::warn!(file = %file.display(), "cannot cache the compiled component: {e}");
        }
        if let Some(file) = &file {
            evict(file, self.limit);
        }
        self.lock().insert(hash, component.clone());
        Ok((component, Provenance::Compiled))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<blake3::Hash, Component>> {
        self.memory.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Removes the least recently used files of `kept`'s directory, never
/// `kept` itself, until what is left fits in `limit` bytes. Another process
/// may be reading a file removed here: it has it in memory, or compiles the
/// component again.
fn evict(kept: &Path, limit: u64) {
    let Some(Ok(entries)) = kept.parent().map(std::fs::read_dir) else { return };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|extension| extension == "cwasm"))
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            Some((metadata.modified().ok()?, metadata.len(), entry.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= limit {
            break;
        }
        if path != kept && std::fs::remove_file(&path).is_ok() {
            tracing::info!(file = %path.display(), "evicted from the compile cache");
            total -= len;
        }
    }
}

/// Reads a cached component. The file is read into memory rather than
/// mapped: a mapped file that someone truncates under a running process
/// kills it with SIGBUS, and a copy of a few hundred KiB costs nothing.
fn load(engine: &Engine, file: &Path) -> wasmtime::Result<Component> {
    let dir_owner = std::fs::metadata(file.parent().unwrap_or(file))?.uid();
    let metadata = std::fs::symlink_metadata(file)?;
    if !metadata.is_file() || metadata.uid() != dir_owner || metadata.mode() & 0o022 != 0 {
        wasmtime::bail!("not a private regular file of the cache's owner");
    }
    let bytes = std::fs::read(file)?;
    // SAFETY: the file was written by `store` below from `Component::serialize`
    // of this engine configuration (the directory name says which), by
    // rename, so it is whole. wasmtime still checks its header; a stale or
    // damaged file fails here and is replaced by a fresh compilation.
    unsafe { Component::deserialize(engine, &bytes) }
}

/// Creates `dir` readable and writable by its owner only, and checks that
/// the owner is this process's user (by creating a file and comparing).
fn make_private(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let probe = tempfile::NamedTempFile::new_in(dir).map_err(|e| e.to_string())?;
    let me = probe.as_file().metadata().map_err(|e| e.to_string())?.uid();
    let metadata = std::fs::metadata(dir).map_err(|e| e.to_string())?;
    if metadata.uid() != me {
        return Err(format!("it belongs to user {}, not to this process's user {me}", metadata.uid()));
    }
    if metadata.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Writes the serialized component next to its final name, then renames it
/// into place, so a crash never leaves a partial file under the final name.
fn store(component: &Component, file: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let dir = file.parent().ok_or("cache file has no directory")?;
    std::fs::create_dir_all(dir)?;
    let serialized = component.serialize()?;
    let mut temporary = tempfile::NamedTempFile::new_in(dir)?;
    temporary.write_all(&serialized)?;
    temporary.as_file().sync_all()?;
    temporary.persist(file)?;
    Ok(())
}
