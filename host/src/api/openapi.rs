//! `/openapi.json`: the API's description, derived by utoipa from the
//! handlers' `#[utoipa::path]` attributes and the `wire` types, so it cannot
//! forget a parameter or a field.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{coordinators, events, reload, runs, status, txlog, views, wire};

#[derive(OpenApi)]
#[openapi(
    info(title = "trellis", description = "Administration of a trellis server: views, runs, coordinators, listeners, plugins, events."),
    paths(
        status::health,
        views::list_views,
        views::pattern_views,
        views::view_log,
        runs::materialize,
        views::invalidate,
        runs::runs,
        runs::run,
        runs::stop,
        views::plan,
        status::transformations,
        status::list_listeners,
        status::enable_listener,
        status::plugins,
        events::events,
        status::metrics,
        status::openapi,
        reload::reload,
        coordinators::list,
        coordinators::actions,
        coordinators::suspend,
        coordinators::resume,
        coordinators::kill,
        coordinators::rerun,
        txlog::all,
        txlog::pattern,
        txlog::reset,
    ),
    components(schemas(wire::ErrorBody)),
    modifiers(&BearerToken)
)]
struct ApiDoc;

/// Mutating routes name the bearer scheme; this declares it.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The description as JSON, rendered once.
pub fn spec() -> String {
    static SPEC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| ApiDoc::openapi().to_pretty_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")))
        .clone()
}
