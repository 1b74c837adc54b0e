//! The `transformation` world: a transformation type writes one view's data.

use std::marker::PhantomData;

use crate::bindings::transformation::exports::trellis::plugin::transform;

pub use transform::{Failure, Input, Outcome, Request};

use crate::PluginInfo;

/// A transformation type. Each call gets a fresh instance, so the plugin
/// keeps no state between views: everything it needs is in the [`Request`].
pub trait Transformation {
    /// Who the plugin is and which configuration keys it reads.
    fn describe() -> PluginInfo;

    /// Materializes `request.view`: read the inputs, write files below
    /// `request.output`. Return [`Outcome::NoData`] when there is nothing to
    /// write. A [`Failure::Retryable`] is retried with backoff; a
    /// [`Failure::Fatal`] fails the view at once.
    fn run(request: Request) -> Result<Outcome, Failure>;
}

impl Failure {
    pub fn fatal(message: impl std::fmt::Display) -> Self {
        Failure::Fatal(message.to_string())
    }

    pub fn retryable(message: impl std::fmt::Display) -> Self {
        Failure::Retryable(message.to_string())
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::Fatal(message) | Failure::Retryable(message) => message,
        }
    }
}

#[doc(hidden)]
pub struct TransformationExport<T>(PhantomData<T>);

impl<T: Transformation> transform::Guest for TransformationExport<T> {
    fn describe() -> PluginInfo {
        crate::set_panic_hook();
        T::describe()
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        crate::set_panic_hook();
        T::run(request)
    }
}
