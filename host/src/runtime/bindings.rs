//! Host-side bindings for the five worlds of `wit/plugin.wit`: the only
//! `bindgen!` in trellis. The shared `types` and `host` interfaces are
//! generated once, with the transformation world, and reused by the others.

pub(crate) mod transformation {
    wasmtime::component::bindgen!({
        world: "transformation",
        path: "../wit",
        exports: { default: async },
    });
}

/// Since 1.1.0: a transformation that also exports `transform-incremental`.
pub(crate) mod incremental {
    wasmtime::component::bindgen!({
        world: "incremental-transformation",
        path: "../wit",
        exports: { default: async },
        with: {
            "trellis:plugin/types": super::transformation::trellis::plugin::types,
            "trellis:plugin/host": super::transformation::trellis::plugin::host,
        },
    });
}

/// Since 1.2.0: a transformation whose views an engine computes from the
/// job the plugin describes.
pub(crate) mod engine {
    wasmtime::component::bindgen!({
        world: "engine-transformation",
        path: "../wit",
        exports: { default: async },
        with: {
            "trellis:plugin/types": super::transformation::trellis::plugin::types,
            "trellis:plugin/host": super::transformation::trellis::plugin::host,
        },
    });
}

pub(crate) mod checksum {
    wasmtime::component::bindgen!({
        world: "checksum",
        path: "../wit",
        exports: { default: async },
        with: {
            "trellis:plugin/types": super::transformation::trellis::plugin::types,
            "trellis:plugin/host": super::transformation::trellis::plugin::host,
        },
    });
}

pub(crate) mod listener {
    wasmtime::component::bindgen!({
        world: "listener",
        path: "../wit",
        exports: { default: async },
        with: {
            "trellis:plugin/types": super::transformation::trellis::plugin::types,
            "trellis:plugin/host": super::transformation::trellis::plugin::host,
        },
    });
}

pub(crate) use transformation::trellis::plugin::host;
pub(crate) use transformation::trellis::plugin::types::{ConfigKey, LogLevel, PluginInfo};
