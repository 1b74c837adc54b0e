//! What handlers take from a request: the shared state, and query and path
//! parameters whose rejection is a one-line 400, like every other error;
//! and the limit on how many views one request's pattern may address.

use std::sync::Arc;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::{ApiError, AppState};

/// The state every handler shares.
pub(super) type Shared = State<Arc<AppState>>;

/// Query parameters, with a bad one answered as a one-line 400.
pub(super) struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(ApiError::bad_request(format!("query: {}", rejection.body_text()))),
        }
    }
}

/// One path parameter, percent-decoded, with a bad one answered as a one-line 400.
pub(super) struct Path(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Path {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<String>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(ApiError::bad_request(format!("path: {}", rejection.body_text()))),
        }
    }
}

/// How many views one request may add, dependencies included (the server
/// gives its scheduler this per-call capacity; reads instantiate too),
/// and so how many its pattern may name. The lattice's own limit (ten
/// million) is for the command line.
pub const REQUEST_PATTERN_LIMIT: usize = 1_000_000;

/// Refuses a pattern that addresses more views than one request may. A
/// pattern that does not parse is left to the scheduler, which says why.
pub(super) fn within_limit(pattern: &str) -> Result<(), ApiError> {
    if let Ok(parsed) = crate::catalog::pattern::parse(pattern) {
        let count = parsed.count().saturating_mul(parsed.view_types.len());
        if count > REQUEST_PATTERN_LIMIT {
            return Err(ApiError::bad_request(format!(
                "the pattern addresses {count} views, more than the limit of {REQUEST_PATTERN_LIMIT} for one request"
            )));
        }
    }
    Ok(())
}
