//! A transformation's `resources`: files of the project that are part of
//! its logic (query files). Each is read here, once, so that the version
//! checksum of every view of the type is over the same contents; a name
//! that is absolute, leaves the project directory (by `..` or a link), or
//! cannot be read is refused with its line.

use std::path::{Component, Path};

use toml::Spanned;

use super::Checker;
use crate::catalog::Resource;

impl Checker<'_> {
    /// The declared resources of view type `view_type`, read; a problem
    /// with any is a diagnostic at its line, and that resource is left out.
    pub(super) fn resources(&mut self, view_type: &str, declared: &[Spanned<String>]) -> Vec<Resource> {
        let mut resources: Vec<Resource> = Vec::with_capacity(declared.len());
        for entry in declared {
            let (name, at) = (entry.get_ref(), entry.span().start);
            if resources.iter().any(|r| &r.name == name) {
                self.error(at, format!("{view_type}: resource `{name}` is listed twice"));
                continue;
            }
            match read(self.root, name) {
                Ok(resource) => resources.push(resource),
                Err(problem) => self.error(at, format!("{view_type}: resource `{name}` {problem}")),
            }
        }
        resources
    }
}

/// Reads `name` inside the project directory `root`, or says what is wrong
/// with it (the rest of a sentence that starts with the resource's name).
fn read(root: &Path, name: &str) -> Result<Resource, String> {
    if name.is_empty() {
        return Err("is empty: give a file path relative to the project directory".into());
    }
    // Control characters would also break the recorded version checksum,
    // which keeps one resource per line.
    if name.chars().any(char::is_control) {
        return Err("may not contain control characters".into());
    }
    let path = Path::new(name);
    if path.has_root() || path.is_absolute() {
        return Err("must be a path relative to the project directory, not an absolute one".into());
    }
    let mut depth = 0usize;
    for component in path.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth == 0 => return Err("is outside the project directory".into()),
            Component::ParentDir => depth -= 1,
            Component::RootDir | Component::Prefix(_) => {
                return Err("must be a path relative to the project directory, not an absolute one".into());
            }
        }
    }
    let full = root.join(path);
    let cannot_read = |e: std::io::Error| format!("cannot be read ({}): {e}", full.display());
    // A link may lead out of the project: what counts is where the file is.
    let real = full.canonicalize().map_err(cannot_read)?;
    let real_root = root.canonicalize().map_err(|e| format!("cannot be read ({}): {e}", root.display()))?;
    if !real.starts_with(&real_root) {
        return Err(format!("is outside the project directory (it leads to {})", real.display()));
    }
    if !real.is_file() {
        return Err(format!("is not a file ({})", full.display()));
    }
    let content: std::sync::Arc<[u8]> = std::fs::read(&real).map_err(cannot_read)?.into();
    let hash = blake3::hash(&content).to_hex()[..16].to_string();
    Ok(Resource { name: name.to_string(), content, hash })
}

#[cfg(test)]
mod tests {
    use super::read;

    #[test]
    fn names_that_leave_the_project_or_are_not_files_are_refused() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("project");
        std::fs::create_dir_all(root.join("sql")).unwrap();
        std::fs::write(root.join("sql/daily.sql"), "select 1").unwrap();
        std::fs::write(outer.path().join("secret.sql"), "select 2").unwrap();
        std::os::unix::fs::symlink(outer.path().join("secret.sql"), root.join("sql/link.sql")).unwrap();

        let ok = read(&root, "sql/daily.sql").unwrap();
        assert_eq!((ok.name.as_str(), &*ok.content), ("sql/daily.sql", &b"select 1"[..]));
        assert_eq!(ok.hash, blake3::hash(b"select 1").to_hex()[..16]);
        assert!(read(&root, "sql/../sql/daily.sql").is_ok());

        let refused = |name: &str| read(&root, name).unwrap_err();
        assert_eq!(refused("/etc/passwd"), "must be a path relative to the project directory, not an absolute one");
        assert_eq!(refused("../secret.sql"), "is outside the project directory");
        assert_eq!(refused("sql/../../secret.sql"), "is outside the project directory");
        assert!(refused("sql/link.sql").starts_with("is outside the project directory (it leads to "));
        assert!(refused("sql/missing.sql").starts_with("cannot be read ("), "{}", refused("sql/missing.sql"));
        assert!(refused("sql").starts_with("is not a file"));
        assert!(refused("").starts_with("is empty"));
        assert_eq!(refused("a\nb"), "may not contain control characters");
    }
}
