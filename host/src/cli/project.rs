//! What every project command takes and how it loads the project: `-p DIR`
//! and `--json`, one view argument, and the project loaded with each
//! problem printed on its own line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::bail;
use clap::Args;

use crate::catalog::{self, Catalog};
use crate::lattice::ViewId;

#[derive(Debug, Args)]
pub(super) struct ProjectArgs {
    /// The project directory, holding trellis.toml
    // Global, so that a subcommand (`listeners enable NAME -p DIR`) takes them too.
    #[arg(long, short = 'p', default_value = ".", value_name = "DIR", global = true)]
    pub(super) project: PathBuf,
    /// Print JSON instead of text
    #[arg(long, global = true)]
    pub(super) json: bool,
}

/// One view, named as `deps` and `logs` always took it (after the
/// command) or with `-v`, as the other commands take their views.
#[derive(Debug, Args)]
pub(super) struct ViewArg {
    /// The view's URL path, e.g. shop.datamart/MonthlySales/SHOP10/2015/05 (`deps --dot`: a view pattern)
    #[arg(value_name = "VIEW", required_unless_present = "view_flag")]
    positional: Option<String>,
    /// The same, given as other commands take their views
    #[arg(id = "view_flag", long = "views", short = 'v', value_name = "VIEW", conflicts_with = "positional")]
    flag: Option<String>,
}

impl ViewArg {
    pub(super) fn get(&self) -> &str {
        self.positional.as_deref().or(self.flag.as_deref()).unwrap_or_default()
    }
}

/// Loads the project; on problems, prints each on its own line (file and
/// line first) and fails with their count.
pub(super) fn load(project: &Path) -> anyhow::Result<Arc<Catalog>> {
    match catalog::load(project) {
        Ok(catalog) => Ok(Arc::new(catalog)),
        Err(catalog::LoadError::Invalid(diagnostics)) => {
            for diagnostic in &diagnostics {
                eprintln!("{}", path_of(project, diagnostic));
            }
            let file = project.join(catalog::PROJECT_FILE);
            bail!("{} problem{} in {}", diagnostics.len(), plural(diagnostics.len()), file.display());
        }
        Err(other) => Err(other.into()),
    }
}

/// Loads a project that a command is to run (`materialize`, `serve`),
/// refusing one that declares no view type: an empty or comment-only file is
/// valid, but running it would quietly do nothing.
pub(super) fn load_to_run(project: &Path, command: &str) -> anyhow::Result<Arc<Catalog>> {
    let catalog = load(project)?;
    if catalog.types().is_empty() {
        bail!("{}; there is nothing to {command}", no_view_types(project));
    }
    Ok(catalog)
}

pub(super) fn no_view_types(project: &Path) -> String {
    format!("{} declares no view type (no [[view]] table)", project.join(catalog::PROJECT_FILE).display())
}

pub(super) fn path_of(project: &Path, diagnostic: &catalog::Diagnostic) -> String {
    let file = project.join(diagnostic.file.as_deref().unwrap_or(catalog::PROJECT_FILE));
    match diagnostic.line {
        Some(line) => format!("{}:{line}: {}", file.display(), diagnostic.message),
        None => format!("{}: {}", file.display(), diagnostic.message),
    }
}

/// The views in their first order, each once (a pattern may address one
/// twice).
pub(super) fn dedup(mut ids: Vec<ViewId>) -> Vec<ViewId> {
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(*id));
    ids
}

pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
