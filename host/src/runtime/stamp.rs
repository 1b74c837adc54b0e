//! The build stamp: a custom section that `trellis plugins build` appends
//! to a component it built from sources, saying what it was built from.
//!
//! Some builders (componentize-py, for Python) do not write the same bytes
//! twice for the same sources, so a component's bytes cannot say whether its
//! logic changed. The stamp can: `sources` hashes the plugin's own files and
//! its SDK's version, and is what a view's default version checksum covers;
//! `build` hashes everything the build read (the sources, the SDK's files,
//! the contract, the builder's version), and decides whether a rebuild is
//! needed at all.
//!
//! Invariant: a component without a stamp is judged by its bytes, as
//! before; only the outermost component's own section is read, never a
//! nested module's.

use std::borrow::Cow;

use wasm_encoder::Section;

/// The custom section's name.
pub const SECTION: &str = "trellis-build";

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stamp {
    /// The plugin's language, e.g. `python`.
    pub language: String,
    /// The version of the SDK it was built with.
    pub sdk: String,
    /// blake3 of the plugin's own files and the SDK's version: its logic.
    pub sources: String,
    /// blake3 of everything the build read: whether to build again.
    pub build: String,
}

/// The stamp of a component, if it has one (and it parses).
pub fn read(bytes: &[u8]) -> Option<Stamp> {
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            wasmparser::Payload::ModuleSection { .. } | wasmparser::Payload::ComponentSection { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.checked_sub(1)?,
            wasmparser::Payload::CustomSection(section) if depth == 0 && section.name() == SECTION => {
                return serde_json::from_slice(section.data()).ok();
            }
            _ => {}
        }
    }
    None
}

/// Appends `stamp` to a component's bytes, as its last section.
pub fn append(bytes: &mut Vec<u8>, stamp: &Stamp) {
    let data = serde_json::to_vec(stamp).expect("a stamp is plain strings");
    wasm_encoder::CustomSection { name: Cow::Borrowed(SECTION), data: Cow::Owned(data) }.append_to(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp() -> Stamp {
        Stamp { language: "python".into(), sdk: "0.1.0".into(), sources: "s".into(), build: "b".into() }
    }

    /// A component holding a core module that has a section of the same name.
    fn component_with_nested_section() -> Vec<u8> {
        let mut module = wasm_encoder::Module::new();
        module.section(&wasm_encoder::CustomSection { name: SECTION.into(), data: b"nested".into() });
        let mut component = wasm_encoder::Component::new();
        component.section(&wasm_encoder::ModuleSection(&module));
        component.finish()
    }

    #[test]
    fn a_stamp_appended_to_a_component_reads_back_and_the_component_still_parses() {
        let mut bytes = component_with_nested_section();
        assert_eq!(read(&bytes), None, "a nested module's section is not the component's stamp");
        append(&mut bytes, &stamp());
        assert_eq!(read(&bytes), Some(stamp()));
        assert!(wasmparser::Parser::new(0).parse_all(&bytes).all(|payload| payload.is_ok()));
    }
}
