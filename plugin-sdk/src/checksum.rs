//! The `checksum` world: a version-checksum function decides what of a
//! transformation's logic counts as a change.

use std::marker::PhantomData;

use crate::bindings::checksum::exports::trellis::plugin::version_checksum;

pub use version_checksum::{ChecksumInput, NamedResource};

use crate::PluginInfo;

/// A version-checksum function. It must be deterministic: the same input
/// always gives the same checksum. The host gives it a fixed clock and
/// fixed random numbers, so accidental non-determinism shows up in tests.
pub trait Checksum {
    fn describe() -> PluginInfo;

    /// The checksum of `input`, or a message saying why there is none.
    fn checksum(input: ChecksumInput) -> Result<String, String>;
}

impl ChecksumInput {
    pub fn config(&self) -> crate::Config<'_> {
        crate::Config::new(&self.config)
    }
}

#[doc(hidden)]
pub struct ChecksumExport<T>(PhantomData<T>);

impl<T: Checksum> version_checksum::Guest for ChecksumExport<T> {
    fn describe() -> PluginInfo {
        crate::set_panic_hook();
        T::describe()
    }

    fn checksum(input: ChecksumInput) -> Result<String, String> {
        crate::set_panic_hook();
        T::checksum(input)
    }
}
