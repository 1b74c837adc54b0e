//! The lattice: instantiated views and their dependency edges.
//!
//! Instantiating a view pattern adds the addressed views and, transitively,
//! every view they depend on. Views are interned: a view is 16 bytes (type,
//! interned parameter tuple, time instance), its edges a range in one shared
//! vector, and URL and data paths are rendered on demand, so a million views
//! fit in well under a kilobyte each.
//!
//! Invariants: every view's parameter values are safe path components, so
//! its data path lies inside the storage root; every edge points at a view
//! of the lattice; a view's edges are fixed when it is added, except those
//! of its `latest(n)` declarations, which [`Lattice::reresolve_latest`]
//! resolves again (against an evaluation time and the data there is then)
//! whenever the scheduler checks the view; which of its `latest(n)`
//! dependencies found no instance with data is kept with them (those count
//! as missing data, never as no dependency). It knows the catalog, but
//! nothing of scheduling state, the metastore or plugins.
//!
//! This file holds the `Lattice` type and what a view is; the rest is split
//! by what it does: `intern` (the store), `instantiate` (adding what a
//! pattern addresses), `resolve` (dependency edges), `edges` (walking
//! them) and `render` (paths and configuration).
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! instantiated views and their edges. Invariants: every
//! parameter value is a safe path component; every edge points into the
//! lattice; a view's edges are fixed when it is added (so `latest()`
//! reflects the data present then), and so are its unsatisfied `latest()`
//! declarations (`unsatisfied`), which the scheduler counts as dependencies
//! without data, never as no dependency. It knows the catalog, nothing of
//! scheduling state, the metastore or plugins.
//! - `mod.rs`: the `Lattice` type, what a view is (`ViewId`, 16-byte keys),
//!   its errors and re-exports.
//! - `intern.rs`: the interned store: a view is (type, interned parameter
//!   tuple, instance index), its edges a range of one shared vector;
//!   adding a view, undoing what was added since a mark, memory used.
//! - `instantiate.rs`: adding the views a pattern or URL path addresses,
//!   their values checked and made canonical; a failed call leaves the
//!   lattice as it was. A `Capacity` bounds what one call may add,
//!   dependencies included, and what the lattice holds; a call that would
//!   pass either fails early and is undone (the server's reads instantiate
//!   too, so its memory is bounded by `--max-views`).
//! - `resolve.rs`: dependency resolution, iterative, in order of addition;
//!   `Resolution` says what outside facts it may use (evaluation time,
//!   whether data exists).
//! - `edges.rs`: a view's dependencies, grouped by declaration, its
//!   unsatisfied `latest()` declarations, and `closure` (for
//!   `views --deps`, `invalidate --deps`).
//! - `render.rs`: URL path, data path, done flag and the transformation's
//!   configuration, rendered on demand.

mod edges;
mod instantiate;
mod intern;
mod render;
mod resolve;

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::catalog::{Catalog, ViewType, ViewTypeId};
pub use resolve::{Resolution, ResolvedView, on_disk};

/// A view in the lattice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewId(pub u32);

/// An interned parameter tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ParamsId(u32);

/// What identifies a view: its type, its parameter values and its time
/// instance (the index from the initial instance; 0 for timeless types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ViewKey {
    view_type: ViewTypeId,
    params: ParamsId,
    instance: i64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("unknown view type {name}{}", suggest(.closest))]
    UnknownViewType { name: String, closest: Vec<String> },
    #[error("{view_type} takes {expected} values ({names}), but the pattern gives {given}: {values}")]
    WrongArity { view_type: String, expected: usize, names: String, given: usize, values: String },
    #[error("{view_type}: parameter {parameter} = `{value}`: {reason}")]
    BadValue { view_type: String, parameter: String, value: String, reason: String },
    #[error("{view_type}: {time} is not an instance: {reason}")]
    BadInstance { view_type: String, time: String, reason: String },
    #[error("the pattern addresses {count} views, more than the limit of {limit}")]
    TooMany { count: usize, limit: usize },
    #[error(
        "the pattern's views and their dependencies come to more than {limit} new views, more than one call may add; address fewer at once"
    )]
    TooManyWithDependencies { limit: usize },
    #[error("the lattice would grow past its limit of {limit} views (it holds {held})")]
    Full { held: usize, limit: usize },
    #[error(transparent)]
    Pattern(crate::catalog::pattern::PatternError),
    #[error("`{url_path}` must name exactly one view, not a pattern")]
    NotOneView { url_path: String },
    #[error("{view}: dependency `{dependency}`: {cause}")]
    /// Its cause is part of the message, not a `source()`: one that was
    /// both would be said twice by an error chain (`{:#}`).
    Dependency { view: String, dependency: String, cause: Box<Error> },
}

fn suggest(closest: &[String]) -> String {
    if closest.is_empty() { String::new() } else { format!("; did you mean {}?", closest.join(" or ")) }
}

/// How many views one pattern may address, so that a typo in a range does
/// not try to instantiate the next thousand years.
pub const PATTERN_LIMIT: usize = 10_000_000;

/// How many views a lattice may hold, and how many one instantiation may
/// add, dependencies included: a server that instantiates what any request
/// addresses must not grow without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub per_call: usize,
    pub total: usize,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity { per_call: PATTERN_LIMIT, total: usize::MAX }
    }
}

pub struct Lattice {
    /// Shared with the scheduler and the server, which outlive no catalog.
    catalog: Arc<Catalog>,
    views: Vec<ViewKey>,
    index: HashMap<ViewKey, ViewId>,
    params: Vec<Box<[Box<str>]>>,
    params_index: HashMap<Box<[Box<str>]>, ParamsId>,
    /// Start of each view's edges in `edges`; a view's edges end where the
    /// next view's start (views are resolved in order of addition).
    edge_start: Vec<u32>,
    edges: Vec<ViewId>,
    /// For each edge, the index of the dependency declaration it comes from.
    edge_origin: Vec<u16>,
    /// Views added but whose dependencies are not resolved yet.
    resolved: usize,
    /// (view, declaration) for every `latest(n)` that found no instance
    /// with data when the view was resolved, in view order: a dependency
    /// that is missing, not one that is not there (see
    /// [`Lattice::unsatisfied`]). Rare, so a list rather than a field per view.
    unsatisfied: Vec<(ViewId, u16)>,
    /// By type: whether it declares a `latest(n)` dependency, the only
    /// edges that are resolved again (so other views pay nothing for it).
    has_latest: Vec<bool>,
    capacity: Capacity,
}

impl Lattice {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Lattice {
            views: Vec::new(),
            index: HashMap::new(),
            params: Vec::new(),
            params_index: HashMap::new(),
            edge_start: Vec::new(),
            edges: Vec::new(),
            edge_origin: Vec::new(),
            resolved: 0,
            unsatisfied: Vec::new(),
            has_latest: catalog
                .types()
                .iter()
                .map(|t| t.dependencies.iter().any(|d| d.time.looks_for_data()))
                .collect(),
            catalog,
            capacity: Capacity::default(),
        }
    }

    /// Limits what the lattice holds from now on; views it holds already stay.
    pub fn set_capacity(&mut self, capacity: Capacity) {
        self.capacity = capacity;
    }

    /// The limits set by `set_capacity`.
    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub fn len(&self) -> usize {
        self.views.len()
    }

    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    pub fn ids(&self) -> impl Iterator<Item = ViewId> {
        (0..self.views.len() as u32).map(ViewId)
    }

    pub fn view_type(&self, id: ViewId) -> &ViewType {
        self.catalog.get(self.views[id.0 as usize].view_type)
    }

    /// The view's parameter values, in declaration order.
    pub fn params(&self, id: ViewId) -> &[Box<str>] {
        &self.params[self.views[id.0 as usize].params.0 as usize]
    }

    /// The view's time instance, if its type has a time dimension.
    pub fn time(&self, id: ViewId) -> Option<DateTime<Utc>> {
        let key = self.views[id.0 as usize];
        self.view_type(id).time.as_ref().and_then(|dataset| dataset.instance(key.instance))
    }
}
