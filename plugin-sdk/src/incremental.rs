//! The `incremental-transformation` world (contract 1.1.0): a transformation
//! that reads only what changed in its inputs since the commit its previous
//! output reflects, and merges that into the previous output.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::bindings::incremental::exports::trellis::plugin::transform_incremental as wit;
use crate::{Failure, InputFile, Outcome, Request, Transformation};

/// What changed in one input since the last commit, file names relative to
/// the input's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputDelta {
    /// False for a dependency declared `incremental = false`: read it whole.
    pub incremental: bool,
    /// The commit recorded for this input with the previous output: the
    /// host's manifest hash, or the offset this plugin returned for it.
    pub last_commit: Option<String>,
    pub new_files: Vec<String>,
    pub changed_files: Vec<String>,
    pub removed_files: Vec<String>,
}

/// An incremental call: the whole request, plus per input what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalRequest {
    /// The request as [`Transformation::run`] gets it, every input whole.
    pub request: Request,
    /// One per input of `request`, in its order.
    pub deltas: Vec<InputDelta>,
    previous_output: Option<String>,
    /// Why this call reads everything, when it does ("first run", "reset",
    /// "version changed", "full refresh"...).
    pub full_reason: Option<String>,
    /// Input views the previous output reflects that are inputs no more.
    pub removed_inputs: Vec<String>,
}

/// What an incremental call returns: the outcome, and offsets of the
/// plugin's own by input view (`Input::view`), committed instead of the
/// host's manifest and handed back as [`InputDelta::last_commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalOutcome {
    pub outcome: Outcome,
    pub commits: Vec<(String, String)>,
}

impl From<Outcome> for IncrementalOutcome {
    fn from(outcome: Outcome) -> Self {
        IncrementalOutcome { outcome, commits: Vec::new() }
    }
}

impl IncrementalRequest {
    /// A plain request as an incremental one that reads everything, for
    /// [`Transformation::run`] of a plugin that does both one way.
    pub fn whole(request: Request) -> IncrementalRequest {
        let deltas = request.inputs.iter().map(|_| InputDelta::default()).collect();
        IncrementalRequest {
            request,
            deltas,
            previous_output: None,
            full_reason: Some("not incremental".into()),
            removed_inputs: Vec::new(),
        }
    }

    /// The view's previously published output, read-only (its files as the
    /// last commit left them); `None` on a full run.
    pub fn previous_output(&self) -> Option<&Path> {
        self.previous_output.as_deref().map(Path::new)
    }

    /// The data files of every input named `name` (a dependency's name)
    /// that are new since the last commit. Inputs read whole
    /// (`incremental = false`) give all their files.
    pub fn new_files(&self, name: &str) -> Result<Vec<InputFile>, Failure> {
        self.files_where(|input| input.name == name, |delta| &delta.new_files)
    }

    /// The new data files of every input, inputs in request order, as
    /// [`Request::input_files`] gives all of them.
    pub fn new_input_files(&self) -> Result<Vec<InputFile>, Failure> {
        self.files_where(|_| true, |delta| &delta.new_files)
    }

    /// The data files of inputs named `name` that changed since the last commit.
    pub fn changed_files(&self, name: &str) -> Result<Vec<InputFile>, Failure> {
        self.files_where(|input| input.name == name, |delta| &delta.changed_files)
    }

    /// The commit recorded with the previous output for the input of view
    /// `view` (its URL path, `Input::view`).
    pub fn last_commit(&self, view: &str) -> Option<&str> {
        let index = self.request.inputs.iter().position(|input| input.view == view)?;
        self.deltas.get(index)?.last_commit.as_deref()
    }

    /// Whether merging the new files into the previous output gives the
    /// whole answer: there is a previous output, and since it no file
    /// changed or went away and no input was dropped. Otherwise read
    /// everything, as [`Transformation::run`] does.
    pub fn can_merge(&self) -> bool {
        self.previous_output.is_some()
            && self.full_reason.is_none()
            && self.removed_inputs.is_empty()
            && self.deltas.iter().all(|delta| delta.changed_files.is_empty() && delta.removed_files.is_empty())
    }

    fn files_where(
        &self,
        keep: impl Fn(&crate::Input) -> bool,
        list: impl Fn(&InputDelta) -> &Vec<String>,
    ) -> Result<Vec<InputFile>, Failure> {
        let mut found = Vec::new();
        for (input, delta) in self.request.inputs.iter().zip(&self.deltas) {
            if !keep(input) {
                continue;
            }
            if !delta.incremental {
                found.extend(input.files()?);
                continue;
            }
            let root = PathBuf::from(&input.path);
            found.extend(list(delta).iter().map(|relative| InputFile {
                input: input.name.clone(),
                path: root.join(relative),
                relative: relative.clone(),
            }));
        }
        Ok(found)
    }
}

/// A transformation type that can also run incrementally. Views of a type
/// declared `incremental = true` are run through [`run_incremental`]; the
/// others, and hosts older than contract 1.1.0, call [`Transformation::run`].
///
/// [`run_incremental`]: IncrementalTransformation::run_incremental
pub trait IncrementalTransformation: Transformation {
    /// Materializes `request.request.view` from what changed: merge the new
    /// files into [`IncrementalRequest::previous_output`] when
    /// [`IncrementalRequest::can_merge`], else read everything. Write the
    /// whole new output to `request.request.output`: the previous one is
    /// replaced by it atomically, as always.
    fn run_incremental(request: IncrementalRequest) -> Result<IncrementalOutcome, Failure>;
}

#[doc(hidden)]
pub struct IncrementalExport<T>(PhantomData<T>);

impl<T: IncrementalTransformation> wit::Guest for IncrementalExport<T> {
    fn run(request: wit::Request) -> Result<wit::Success, wit::Failure> {
        crate::set_panic_hook();
        let deltas = request
            .inputs
            .iter()
            .map(|input| InputDelta {
                incremental: input.incremental,
                last_commit: input.last_commit.clone(),
                new_files: input.new_files.clone(),
                changed_files: input.changed_files.clone(),
                removed_files: input.removed_files.clone(),
            })
            .collect();
        let inputs = request
            .inputs
            .into_iter()
            .map(|input| crate::Input {
                name: input.name,
                view: input.view,
                path: input.path,
                timestamp: input.timestamp,
                changed: input.changed,
            })
            .collect();
        let incremental = IncrementalRequest {
            request: Request {
                view: request.view,
                parameters: request.parameters,
                nominal_time: request.nominal_time,
                actual_time: request.actual_time,
                config: request.config,
                inputs,
                output: request.output,
            },
            deltas,
            previous_output: request.previous_output,
            full_reason: request.full_reason,
            removed_inputs: request.removed_inputs,
        };
        match T::run_incremental(incremental) {
            Ok(done) => {
                let outcome = match done.outcome {
                    Outcome::Data(counters) => wit::Outcome::Data(counters),
                    Outcome::NoData => wit::Outcome::NoData,
                };
                Ok(wit::Success { outcome, commits: done.commits })
            }
            Err(Failure::Retryable(message)) => Err(wit::Failure::Retryable(message)),
            Err(Failure::Fatal(message)) => Err(wit::Failure::Fatal(message)),
        }
    }
}
