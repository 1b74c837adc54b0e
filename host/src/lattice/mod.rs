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
//! of the lattice; a view's edges are fixed when it is added. It knows the
//! catalog, but nothing of scheduling state, the metastore or plugins.

use std::collections::HashMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};

use crate::catalog::pattern::Pattern;
use crate::catalog::{
    Binding, Catalog, ParameterKind, TIME_VARIABLES, TimeSelection, Transformation, ViewType, ViewTypeId, expression,
};

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
    #[error(transparent)]
    Pattern(crate::catalog::pattern::PatternError),
    #[error("`{url_path}` must name exactly one view, not a pattern")]
    NotOneView { url_path: String },
    #[error("{view}: dependency `{dependency}`: {source}")]
    Dependency { view: String, dependency: String, source: Box<Error> },
}

fn suggest(closest: &[String]) -> String {
    if closest.is_empty() { String::new() } else { format!("; did you mean {}?", closest.join(" or ")) }
}

/// How many views one pattern may address, so that a typo in a range does
/// not try to instantiate the next thousand years.
pub const PATTERN_LIMIT: usize = 10_000_000;

/// What dependency resolution may need from outside: the evaluation time
/// of `latest()` and whether a view's data exists.
pub struct Resolution<'a> {
    pub evaluation_time: DateTime<Utc>,
    pub exists: &'a dyn Fn(&Lattice<'_>, &ResolvedView) -> bool,
}

/// The usual answer to "does this view's data exist": its done flag is on
/// disk.
pub fn on_disk(lattice: &Lattice<'_>, view: &ResolvedView) -> bool {
    lattice.done_flag_path_of(view).exists()
}

/// A view that is about to be interned, as `latest()` sees it.
pub struct ResolvedView<'a> {
    pub view_type: ViewTypeId,
    pub params: &'a [String],
    pub instance: i64,
}

pub struct Lattice<'c> {
    catalog: &'c Catalog,
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
}

impl<'c> Lattice<'c> {
    pub fn new(catalog: &'c Catalog) -> Self {
        Lattice {
            catalog,
            views: Vec::new(),
            index: HashMap::new(),
            params: Vec::new(),
            params_index: HashMap::new(),
            edge_start: Vec::new(),
            edges: Vec::new(),
            edge_origin: Vec::new(),
            resolved: 0,
        }
    }

    pub fn catalog(&self) -> &'c Catalog {
        self.catalog
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

    /// The views a pattern addresses, added with all their dependencies.
    pub fn instantiate(&mut self, pattern: &Pattern, resolution: &Resolution<'_>) -> Result<Vec<ViewId>, Error> {
        let count = pattern.count().saturating_mul(pattern.view_types.len());
        if count > PATTERN_LIMIT {
            return Err(Error::TooMany { count, limit: PATTERN_LIMIT });
        }
        let mut types = Vec::new();
        for short in &pattern.view_types {
            let name = format!("{}/{short}", pattern.package);
            let view_type = self.catalog.find(&name).ok_or_else(|| Error::UnknownViewType {
                closest: self.catalog.closest(&name).into_iter().map(String::from).collect(),
                name: name.clone(),
            })?;
            types.push(view_type);
        }
        let mark = self.mark();
        let result = (|| {
            let mut addressed = Vec::new();
            for view_type in types {
                for values in pattern.parameter_lists() {
                    let (params, instance) = parse_values(view_type, &values)?;
                    addressed.push(self.intern(view_type.id, params, instance));
                }
            }
            self.resolve_pending(resolution)?;
            Ok(addressed)
        })();
        if result.is_err() {
            self.rollback(mark);
        }
        result
    }

    /// Where the lattice stands, to undo a failed instantiation.
    fn mark(&self) -> (usize, usize) {
        (self.views.len(), self.edges.len())
    }

    /// Forgets every view added since `mark`, so that a failed
    /// instantiation leaves no half-resolved views behind.
    fn rollback(&mut self, (views, edges): (usize, usize)) {
        for key in self.views.drain(views..) {
            self.index.remove(&key);
        }
        self.edge_start.truncate(views);
        self.edges.truncate(edges);
        self.edge_origin.truncate(edges);
        self.resolved = views;
    }

    /// The view with this URL path, added with its dependencies. The path
    /// is read like a pattern (so `%2F` means the same everywhere) and must
    /// address exactly one view.
    pub fn view(&mut self, url_path: &str, resolution: &Resolution<'_>) -> Result<ViewId, Error> {
        let pattern = crate::catalog::pattern::parse(url_path).map_err(Error::Pattern)?;
        if pattern.view_types.len() != 1 || pattern.count() != 1 {
            return Err(Error::NotOneView { url_path: url_path.to_string() });
        }
        let addressed = self.instantiate(&pattern, resolution)?;
        Ok(addressed[0])
    }

    fn intern(&mut self, view_type: ViewTypeId, params: Vec<String>, instance: i64) -> ViewId {
        let params: Box<[Box<str>]> = params.into_iter().map(String::into_boxed_str).collect();
        let params = match self.params_index.get(&params) {
            Some(&id) => id,
            None => {
                let id = ParamsId(self.params.len() as u32);
                self.params.push(params.clone());
                self.params_index.insert(params, id);
                id
            }
        };
        let key = ViewKey { view_type, params, instance };
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let id = ViewId(self.views.len() as u32);
        self.views.push(key);
        self.index.insert(key, id);
        id
    }

    /// Resolves the dependencies of every view not resolved yet, in order
    /// of addition; new dependencies join the end of the queue. Iterative,
    /// because a `current(-1)` chain can be thousands of views deep.
    fn resolve_pending(&mut self, resolution: &Resolution<'_>) -> Result<(), Error> {
        let mut keys = Vec::new();
        while self.resolved < self.views.len() {
            let id = ViewId(self.resolved as u32);
            keys.clear();
            self.dependency_keys(id, resolution, &mut keys)?;
            self.edge_start.push(self.edges.len() as u32);
            for (origin, view_type, params, instance) in keys.drain(..) {
                let dependency = self.intern(view_type, params, instance);
                self.edges.push(dependency);
                self.edge_origin.push(origin);
            }
            self.resolved += 1;
        }
        Ok(())
    }

    /// The views `id` depends on, as (type, parameters, instance).
    fn dependency_keys(
        &self,
        id: ViewId,
        resolution: &Resolution<'_>,
        out: &mut Vec<(u16, ViewTypeId, Vec<String>, i64)>,
    ) -> Result<(), Error> {
        let key = self.views[id.0 as usize];
        let view_type = self.catalog.get(key.view_type);
        let own_params = &self.params[key.params.0 as usize];
        let value_of = |name: &str| view_type.parameters.iter().position(|p| p.name == name).map(|i| &*own_params[i]);
        for (origin, dependency) in view_type.dependencies.iter().enumerate() {
            let origin = origin as u16;
            let target = self.catalog.get(dependency.target);
            // Parameter values: the cartesian product of the bindings.
            let mut tuples: Vec<Vec<String>> = vec![Vec::new()];
            for (binding, parameter) in dependency.parameters.iter().zip(&target.parameters) {
                let rendered: Vec<String> = match binding {
                    Binding::One(template) => vec![template.render(value_of)],
                    Binding::Each(templates) => templates.iter().map(|t| t.render(value_of)).collect(),
                };
                let mut values = Vec::with_capacity(rendered.len());
                for value in &rendered {
                    let value =
                        check_value(target, &parameter.name, parameter.kind, value).map_err(|e| Error::Dependency {
                            view: self.url_path(id),
                            dependency: dependency.name.clone(),
                            source: Box::new(e),
                        })?;
                    if !values.contains(&value) {
                        values.push(value);
                    }
                }
                tuples = tuples
                    .into_iter()
                    .flat_map(|tuple| {
                        values.iter().map(move |value| {
                            let mut tuple = tuple.clone();
                            tuple.push(value.clone());
                            tuple
                        })
                    })
                    .collect();
            }
            // Time instances.
            let instances: Vec<i64> = match (dependency.time, &view_type.time, &target.time) {
                (TimeSelection::Timeless, _, _) | (_, _, None) => vec![0],
                (TimeSelection::Current { from, to }, Some(own), Some(theirs)) => {
                    let nominal = own.instance(key.instance).expect("a lattice view is an instance");
                    (from..=to).filter_map(|n| theirs.current_index(nominal, n)).collect()
                }
                (TimeSelection::All, Some(own), Some(theirs)) => {
                    let start = own.instance(key.instance).expect("a lattice view is an instance");
                    let end = own.instance(key.instance + 1).unwrap_or(start);
                    theirs.indices_within(start, end).collect()
                }
                (TimeSelection::Current { .. } | TimeSelection::All, None, Some(_)) => Vec::new(),
                (TimeSelection::Latest(n), _, Some(theirs)) => {
                    for params in &tuples {
                        let exists = |instance: i64| {
                            let view = ResolvedView { view_type: target.id, params, instance };
                            (resolution.exists)(self, &view)
                        };
                        if let Some(instance) = theirs.latest_index(resolution.evaluation_time, n, exists) {
                            out.push((origin, target.id, params.clone(), instance));
                        }
                    }
                    continue;
                }
            };
            let mut instances = instances;
            instances.dedup();
            for params in &tuples {
                for &instance in &instances {
                    out.push((origin, target.id, params.clone(), instance));
                }
            }
        }
        Ok(())
    }

    pub fn view_type(&self, id: ViewId) -> &'c ViewType {
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

    /// The views and everything they depend on, each once, the given views
    /// first, then breadth first.
    pub fn closure(&self, addressed: &[ViewId]) -> Vec<ViewId> {
        let mut seen = vec![false; self.views.len()];
        let mut order = Vec::new();
        let mut queue: std::collections::VecDeque<ViewId> = addressed.iter().copied().collect();
        while let Some(id) = queue.pop_front() {
            if !std::mem::replace(&mut seen[id.0 as usize], true) {
                order.push(id);
                queue.extend(self.dependencies(id).iter().copied());
            }
        }
        order
    }

    pub fn dependencies(&self, id: ViewId) -> &[ViewId] {
        &self.edges[self.edge_range(id)]
    }

    /// The dependencies of `id` grouped by the declaration they come from,
    /// in declaration order (one group per `[[view.dependency]]`).
    pub fn dependencies_by_declaration(&self, id: ViewId) -> Vec<Vec<ViewId>> {
        let mut groups = vec![Vec::new(); self.view_type(id).dependencies.len()];
        let range = self.edge_range(id);
        for (edge, origin) in self.edges[range.clone()].iter().zip(&self.edge_origin[range]) {
            groups[*origin as usize].push(*edge);
        }
        groups
    }

    fn edge_range(&self, id: ViewId) -> std::ops::Range<usize> {
        let index = id.0 as usize;
        let start = self.edge_start[index] as usize;
        let end = self.edge_start.get(index + 1).map_or(self.edges.len(), |&end| end as usize);
        start..end
    }

    /// `package/Name/<param values>/<yyyy/MM/dd/HH/mm as deep as the frequency>`.
    pub fn url_path(&self, id: ViewId) -> String {
        let view_type = self.view_type(id);
        let mut path = view_type.name.clone();
        for value in self.params(id) {
            path.push('/');
            // Written so that the pattern parser reads it back as this value.
            for c in value.chars() {
                match c {
                    '%' => path.push_str("%25"),
                    '(' | ')' | ',' | '\\' => {
                        path.push('\\');
                        path.push(c);
                    }
                    c => path.push(c),
                }
            }
        }
        if let (Some(dataset), Some(time)) = (&view_type.time, self.time(id)) {
            for component in dataset.path_components(time) {
                path.push('/');
                path.push_str(&component);
            }
        }
        path
    }

    /// Where the view's data lives: its type's path template under the
    /// storage root.
    pub fn data_path(&self, id: ViewId) -> PathBuf {
        let key = self.views[id.0 as usize];
        self.render_data_path(self.view_type(id), self.params(id), key.instance)
    }

    /// The view's done flag file, or its directory when the flag is empty.
    pub fn done_flag_path(&self, id: ViewId) -> PathBuf {
        let key = self.views[id.0 as usize];
        self.render_done_flag(self.view_type(id), self.params(id), key.instance)
    }

    /// The done flag of a view that is being resolved, for `latest()`.
    pub fn done_flag_path_of(&self, view: &ResolvedView) -> PathBuf {
        self.render_done_flag(self.catalog.get(view.view_type), view.params, view.instance)
    }

    fn render_done_flag(&self, view_type: &ViewType, params: &[impl AsRef<str>], instance: i64) -> PathBuf {
        let path = self.render_data_path(view_type, params, instance);
        if view_type.done_flag.is_empty() { path } else { path.join(&view_type.done_flag) }
    }

    fn render_data_path(&self, view_type: &ViewType, params: &[impl AsRef<str>], instance: i64) -> PathBuf {
        let time_values = match &view_type.time {
            Some(dataset) => dataset.instance(instance).map(|time| dataset.path_components(time)).unwrap_or_default(),
            None => Vec::new(),
        };
        let relative = view_type.path.render(|name| {
            if let Some(i) = view_type.parameters.iter().position(|p| p.name == name) {
                return params.get(i).map(AsRef::as_ref);
            }
            let level = TIME_VARIABLES.iter().position(|v| *v == name)?;
            time_values.get(level).map(String::as_str)
        });
        self.catalog.settings.storage.join(relative)
    }

    /// The view's transformation configuration with every `${...}`
    /// resolved. `path_of` says how a view's data appears to whoever reads
    /// the configuration: its data path for people, its guest path for a
    /// plugin.
    pub fn config(
        &self,
        id: ViewId,
        actual_time: DateTime<Utc>,
        data_out: &str,
        path_of: &dyn Fn(ViewId) -> String,
    ) -> Result<Vec<(String, String)>, String> {
        let view_type = self.view_type(id);
        let Transformation::Plugin { config, .. } = &view_type.transformation else {
            return Ok(Vec::new());
        };
        let params = self.params(id);
        let groups = self.dependencies_by_declaration(id);
        let parameter =
            |name: &str| view_type.parameters.iter().position(|p| p.name == name).map(|i| params[i].to_string());
        let data_in = |name: &str| {
            let slot = view_type.dependencies.iter().position(|d| d.name == name)?;
            Some(groups[slot].iter().map(|&d| path_of(d)).collect::<Vec<_>>().join(","))
        };
        let context = expression::Context {
            parameter: &parameter,
            data_in: &data_in,
            data_out: data_out.to_string(),
            nominal_time: self.time(id),
            actual_time,
            timezone: view_type.time.as_ref().map_or(chrono_tz::Tz::UTC, |dataset| dataset.timezone()),
        };
        config
            .iter()
            .map(|(key, value)| {
                value.resolve(&context).map(|v| (key.clone(), v)).map_err(|e| format!("config `{key}`: {e}"))
            })
            .collect()
    }

    /// Bytes used by the lattice's own structures (not the catalog), for the
    /// benchmark's per-view figure.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let params: usize =
            self.params.iter().map(|p| p.iter().map(|s| s.len() + size_of::<Box<str>>()).sum::<usize>()).sum();
        self.views.capacity() * size_of::<ViewKey>()
            + self.index.capacity() * (size_of::<ViewKey>() + size_of::<ViewId>() + 1)
            + self.edge_start.capacity() * 4
            + self.edges.capacity() * size_of::<ViewId>()
            + self.edge_origin.capacity() * 2
            + 2 * params
    }
}

/// Splits a view's URL values into parameters and its time instance.
fn parse_values(view_type: &ViewType, values: &[String]) -> Result<(Vec<String>, i64), Error> {
    let depth = view_type.time.as_ref().map_or(0, |dataset| dataset.frequency().depth());
    let expected = view_type.parameters.len() + depth;
    if values.len() != expected {
        let mut names: Vec<&str> = view_type.parameters.iter().map(|p| p.name.as_str()).collect();
        names.extend(["yyyy", "MM", "dd", "HH", "mm"][..depth].iter().copied());
        return Err(Error::WrongArity {
            view_type: view_type.name.clone(),
            expected,
            names: crate::catalog::names_or_none(&names),
            given: values.len(),
            values: values.join("/"),
        });
    }
    let (params, time) = values.split_at(view_type.parameters.len());
    let params = view_type
        .parameters
        .iter()
        .zip(params)
        .map(|(parameter, value)| check_value(view_type, &parameter.name, parameter.kind, value))
        .collect::<Result<Vec<_>, _>>()?;
    let instance = match &view_type.time {
        None => 0,
        Some(dataset) => dataset.index_of_components(time).map_err(|reason| Error::BadInstance {
            view_type: view_type.name.clone(),
            time: time.join("/"),
            reason,
        })?,
    };
    Ok((params, instance))
}

/// A parameter value, checked and made canonical by the catalog's rule.
fn check_value(view_type: &ViewType, parameter: &str, kind: ParameterKind, value: &str) -> Result<String, Error> {
    crate::catalog::canonical_value(kind, value).map_err(|reason| Error::BadValue {
        view_type: view_type.name.clone(),
        parameter: parameter.to_string(),
        value: value.escape_debug().to_string(),
        reason: reason.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{self, pattern};

    const PROJECT: &str = r#"
[[view]]
name = "t.a/Count"
parameters = [{ name = "n", type = "int" }]

[[view]]
name = "t.a/Label"
parameters = [{ name = "label" }]

[[view.dependency]]
view = "t.a/Count"
parameters = { n = "${label}" }
"#;

    fn resolution() -> Resolution<'static> {
        Resolution { evaluation_time: Utc::now(), exists: &|_, _| false }
    }

    #[test]
    fn a_failed_instantiation_leaves_the_lattice_as_it_was() {
        let catalog = catalog::parse(PROJECT, std::path::Path::new("/p")).unwrap();
        let mut lattice = Lattice::new(&catalog);
        let good = lattice.instantiate(&pattern::parse("t.a/Label/7").unwrap(), &resolution()).unwrap();
        assert_eq!(lattice.len(), 2);
        let error = lattice.instantiate(&pattern::parse("t.a/Label/e(8,abc)").unwrap(), &resolution()).unwrap_err();
        assert_eq!(error.to_string(), "t.a/Label/abc: dependency `count`: t.a/Count: parameter n = `abc`: not an int");
        assert_eq!(lattice.len(), 2, "views of the failed call were kept");
        for id in lattice.ids() {
            let _ = lattice.dependencies(id);
        }
        let again = lattice.instantiate(&pattern::parse("t.a/Label/e(7,8)").unwrap(), &resolution()).unwrap();
        assert_eq!(again[0], good[0]);
        assert_eq!(lattice.len(), 4);
        let count = lattice.dependencies(again[1])[0];
        assert_eq!(lattice.url_path(count), "t.a/Count/8");
    }
}
