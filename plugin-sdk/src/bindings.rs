//! The generated bindings, one module per world. Plugin authors never name
//! these: they implement the SDK's traits and call its export macros.

/// Bindings for the `transformation` world. The shared `types` and `host`
/// interfaces are generated here once and reused by the other worlds, so
/// that `PluginInfo` is one type whatever the plugin kind.
pub mod transformation {
    wit_bindgen::generate!({
        world: "transformation",
        path: "../wit",
        runtime_path: "trellis_plugin_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "__export_transformation_world",
        default_bindings_module: "trellis_plugin_sdk::bindings::transformation",
        additional_derives: [PartialEq, Eq],
    });
}

/// Bindings for `transform-incremental` alone (contract 1.1.0), in a world
/// of the SDK's own. An incremental plugin exports it beside the
/// transformation world's `transform` (both export macros are called), and
/// the component's world is the union: `incremental-transformation`.
pub mod incremental {
    wit_bindgen::generate!({
        inline: "
            package trellis:sdk;
            world incremental-part {
                import trellis:plugin/host@1.2.0;
                export trellis:plugin/transform-incremental@1.2.0;
            }
        ",
        path: "../wit",
        world: "trellis:sdk/incremental-part",
        runtime_path: "trellis_plugin_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "__export_incremental_part_world",
        default_bindings_module: "trellis_plugin_sdk::bindings::incremental",
        with: {
            "trellis:plugin/types@1.2.0": crate::bindings::transformation::trellis::plugin::types,
            "trellis:plugin/host@1.2.0": crate::bindings::transformation::trellis::plugin::host,
        },
        additional_derives: [PartialEq, Eq],
    });
}

/// Bindings for the `engine-transformation` world (contract 1.2.0).
pub mod engine {
    wit_bindgen::generate!({
        world: "engine-transformation",
        path: "../wit",
        runtime_path: "trellis_plugin_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "__export_engine_transformation_world",
        default_bindings_module: "trellis_plugin_sdk::bindings::engine",
        with: {
            "trellis:plugin/types@1.2.0": crate::bindings::transformation::trellis::plugin::types,
            "trellis:plugin/host@1.2.0": crate::bindings::transformation::trellis::plugin::host,
        },
        additional_derives: [PartialEq, Eq],
    });
}

/// Bindings for the `checksum` world.
pub mod checksum {
    wit_bindgen::generate!({
        world: "checksum",
        path: "../wit",
        runtime_path: "trellis_plugin_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "__export_checksum_world",
        default_bindings_module: "trellis_plugin_sdk::bindings::checksum",
        with: {
            "trellis:plugin/types@1.2.0": crate::bindings::transformation::trellis::plugin::types,
            "trellis:plugin/host@1.2.0": crate::bindings::transformation::trellis::plugin::host,
        },
        additional_derives: [PartialEq, Eq],
    });
}

/// Bindings for the `listener` world.
pub mod listener {
    wit_bindgen::generate!({
        world: "listener",
        path: "../wit",
        runtime_path: "trellis_plugin_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "__export_listener_world",
        default_bindings_module: "trellis_plugin_sdk::bindings::listener",
        with: {
            "trellis:plugin/types@1.2.0": crate::bindings::transformation::trellis::plugin::types,
            "trellis:plugin/host@1.2.0": crate::bindings::transformation::trellis::plugin::host,
        },
        additional_derives: [PartialEq, Eq],
    });
}
