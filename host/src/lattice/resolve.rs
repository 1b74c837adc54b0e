//! Dependency resolution: the edges of each view added, from its type's
//! dependency declarations, resolved in order of addition.

use chrono::{DateTime, Utc};

use super::instantiate::check_value;
use super::intern::Mark;
use super::{Error, Lattice, ViewId};
use crate::catalog::time::Dataset;
use crate::catalog::{Binding, Dependency, TimeSelection, ViewTypeId};
use crate::storage::ViewStore;

/// What dependency resolution may need from outside: the evaluation time
/// of `latest()` and whether a view's data exists.
pub struct Resolution<'a> {
    pub evaluation_time: DateTime<Utc>,
    pub exists: &'a dyn Fn(&Lattice, &ResolvedView) -> bool,
}

/// The usual answer to "does this view's data exist": its done flag is in
/// `storage`, asked through one [`ViewStore::presence`] for the walk (an
/// object store lists a month once rather than HEAD each day of it).
pub fn on_disk(storage: &dyn ViewStore) -> impl Fn(&Lattice, &ResolvedView) -> bool + '_ {
    let presence = storage.presence();
    move |lattice, view| presence.exists(&storage.key(&lattice.done_flag_path_of(view)))
}

/// A view that is about to be interned, as `latest()` sees it.
pub struct ResolvedView<'a> {
    pub view_type: ViewTypeId,
    pub params: &'a [String],
    pub instance: i64,
}

impl Lattice {
    /// Resolves the dependencies of every view not resolved yet, in order
    /// of addition; new dependencies join the end of the queue. Iterative,
    /// because a `current(-1)` chain can be thousands of views deep.
    /// Fails, before it has added much, once the views added since `mark`
    /// are more than the lattice's capacity allows.
    pub(super) fn resolve_pending(&mut self, resolution: &Resolution<'_>, mark: Mark) -> Result<(), Error> {
        let (mut keys, mut unsatisfied) = (Vec::new(), Vec::new());
        while self.resolved < self.views.len() {
            let id = ViewId(self.resolved as u32);
            keys.clear();
            unsatisfied.clear();
            self.dependency_keys(id, resolution, &mut keys, &mut unsatisfied)?;
            self.unsatisfied.extend(unsatisfied.iter().map(|&origin| (id, origin)));
            self.edge_start.push(self.edges.len() as u32);
            for (origin, view_type, params, instance) in keys.drain(..) {
                let dependency = self.intern(view_type, params, instance);
                self.edges.push(dependency);
                self.edge_origin.push(origin);
            }
            self.resolved += 1;
            self.within_capacity(mark)?;
        }
        Ok(())
    }

    /// The views `id` depends on, as (type, parameters, instance), and in
    /// `unsatisfied` the declarations (one entry per parameter tuple) whose
    /// `latest(n)` found no instance with data.
    fn dependency_keys(
        &self,
        id: ViewId,
        resolution: &Resolution<'_>,
        out: &mut Vec<(u16, ViewTypeId, Vec<String>, i64)>,
        unsatisfied: &mut Vec<u16>,
    ) -> Result<(), Error> {
        let key = self.views[id.0 as usize];
        let view_type = self.catalog.get(key.view_type);
        for (origin, dependency) in view_type.dependencies.iter().enumerate() {
            let origin = origin as u16;
            let target = self.catalog.get(dependency.target);
            let tuples = self.parameter_tuples(id, dependency)?;
            let own = view_type.time.as_ref();
            let Some(mut instances) = fixed_instances(dependency.time, key.instance, own, target.time.as_ref()) else {
                // future(n, limit) and latest(n): per tuple, the instance found among those with data.
                for params in &tuples {
                    let exists = |instance: i64| {
                        let view = ResolvedView { view_type: target.id, params, instance };
                        (resolution.exists)(self, &view)
                    };
                    match searched_instance(
                        dependency.time,
                        key.instance,
                        own,
                        target.time.as_ref(),
                        resolution,
                        exists,
                    ) {
                        Some(instance) => out.push((origin, target.id, params.clone(), instance)),
                        // Seed 002: Oozie waits for it; here it is missing
                        // data, as an instance without its done flag is.
                        None => unsatisfied.push(origin),
                    }
                }
                continue;
            };
            instances.dedup();
            for params in &tuples {
                for &instance in &instances {
                    out.push((origin, target.id, params.clone(), instance));
                }
            }
        }
        Ok(())
    }

    /// The target's parameter values `dependency` gives view `id`: the
    /// cartesian product of its bindings, each value checked.
    fn parameter_tuples(&self, id: ViewId, dependency: &Dependency) -> Result<Vec<Vec<String>>, Error> {
        let key = self.views[id.0 as usize];
        let view_type = self.catalog.get(key.view_type);
        let target = self.catalog.get(dependency.target);
        let own_params = &self.params[key.params.0 as usize];
        let value_of = |name: &str| view_type.parameters.iter().position(|p| p.name == name).map(|i| &*own_params[i]);
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
                        cause: Box::new(e),
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
        Ok(tuples)
    }
}

/// The target's instances a selection names for the dependent's instance
/// `instance`, whatever data exists; none for `future(n, limit)` and
/// `latest(n)`, which look for data (see `searched_instance`).
fn fixed_instances(
    selection: TimeSelection,
    instance: i64,
    own: Option<&Dataset>,
    theirs: Option<&Dataset>,
) -> Option<Vec<i64>> {
    let nominal = || own.and_then(|own| own.instance(instance)).expect("a lattice view is an instance");
    Some(match (selection, own, theirs) {
        (TimeSelection::Timeless, _, _) | (_, _, None) => vec![0],
        (TimeSelection::Current { from, to }, Some(_), Some(theirs)) => {
            (from..=to).filter_map(|n| theirs.current_index(nominal(), n)).collect()
        }
        (TimeSelection::All, Some(own), Some(theirs)) => {
            let start = nominal();
            let end = own.instance(instance + 1).unwrap_or(start);
            theirs.indices_within(start, end).collect()
        }
        (TimeSelection::Offset { from, to, unit }, Some(_), Some(theirs)) => {
            let nominal = nominal();
            // Instances before the initial one do not exist; a range that starts there begins at it.
            match theirs.offset_index(nominal, to, unit) {
                Some(last) => (theirs.offset_index(nominal, from, unit).unwrap_or(0)..=last).collect(),
                None => Vec::new(),
            }
        }
        (TimeSelection::Absolute { from, to }, Some(_), Some(theirs)) => {
            match (theirs.index_at_or_before(from), theirs.current_index(nominal(), to)) {
                (Some(first), Some(last)) => (first..=last).collect(),
                _ => Vec::new(),
            }
        }
        (
            TimeSelection::Current { .. }
            | TimeSelection::All
            | TimeSelection::Offset { .. }
            | TimeSelection::Absolute { .. }
            | TimeSelection::Future { .. },
            None,
            Some(_),
        ) => Vec::new(),
        (TimeSelection::Future { .. }, Some(_), Some(_)) | (TimeSelection::Latest(_), _, Some(_)) => return None,
    })
}

/// The one instance `future(n, limit)` or `latest(n)` finds among those
/// with data (`exists`), if there is one; never called for the selections
/// `fixed_instances` answers.
fn searched_instance(
    selection: TimeSelection,
    instance: i64,
    own: Option<&Dataset>,
    theirs: Option<&Dataset>,
    resolution: &Resolution<'_>,
    exists: impl Fn(i64) -> bool,
) -> Option<i64> {
    match (selection, own, theirs) {
        (TimeSelection::Future { n, limit }, Some(own), Some(theirs)) => {
            let nominal = own.instance(instance).expect("a lattice view is an instance");
            // The n-th instance with data among the next `limit`; like latest(n), Oozie waits
            // for it when there are not enough yet.
            theirs
                .future_indices(nominal, limit)
                .take_while(|&k| theirs.instance(k).is_some())
                .filter(|&k| exists(k))
                .nth(n as usize)
        }
        (TimeSelection::Latest(n), _, Some(theirs)) => theirs.latest_index(resolution.evaluation_time, n, exists),
        _ => None,
    }
}

impl Lattice {
    /// Whether the view declares a `latest(n)` dependency, whose edges
    /// [`Lattice::reresolve_latest`] resolves again.
    pub fn has_latest(&self, id: ViewId) -> bool {
        self.has_latest[self.views[id.0 as usize].view_type.0 as usize]
    }

    /// Whether any view type declares a `latest(n)` dependency.
    pub fn any_latest(&self) -> bool {
        self.has_latest.contains(&true)
    }

    /// Resolves the edges of a view's `latest(n)` declarations again (with
    /// all its others, which come out as they were): seed 002 evaluates
    /// `latest()` against a time and the data there is then, not once for
    /// good. Returns the view's previous dependencies when its edges (or
    /// which declarations are unsatisfied) changed, `None` when they did
    /// not or the view declares no `latest(n)`. An instance new to the
    /// lattice is added with its own dependencies; if that would pass the
    /// lattice's capacity, nothing changes and the error says why.
    ///
    /// The edges stay in one vector: the same number of edges is written
    /// over the old ones; a different number (a declaration satisfied or
    /// unsatisfied now) is spliced in, moving the ranges of later views,
    /// which costs a pass over the lattice, but only when it happens.
    pub fn reresolve_latest(&mut self, id: ViewId, resolution: &Resolution<'_>) -> Result<Option<Vec<ViewId>>, Error> {
        if !self.has_latest(id) {
            return Ok(None);
        }
        let (mut keys, mut unsatisfied) = (Vec::new(), Vec::new());
        self.dependency_keys(id, resolution, &mut keys, &mut unsatisfied)?;
        let mark = self.mark();
        let (mut edges, mut origins) = (Vec::with_capacity(keys.len()), Vec::with_capacity(keys.len()));
        for (origin, view_type, params, instance) in keys {
            edges.push(self.intern(view_type, params, instance));
            origins.push(origin);
        }
        if let Err(e) = self.within_capacity(mark).and_then(|()| self.resolve_pending(resolution, mark)) {
            self.rollback(mark);
            return Err(e);
        }
        let range = self.edge_range(id);
        let from = self.unsatisfied.partition_point(|(view, _)| *view < id);
        let to = from + self.unsatisfied[from..].iter().take_while(|(view, _)| *view == id).count();
        let same_unsatisfied =
            self.unsatisfied[from..to].iter().map(|(_, origin)| *origin).eq(unsatisfied.iter().copied());
        if self.edges[range.clone()] == edges[..] && self.edge_origin[range.clone()] == origins[..] && same_unsatisfied
        {
            return Ok(None);
        }
        let previous = self.edges[range.clone()].to_vec();
        self.unsatisfied.splice(from..to, unsatisfied.into_iter().map(|origin| (id, origin)));
        if range.len() == edges.len() {
            self.edges[range.clone()].copy_from_slice(&edges);
            self.edge_origin[range].copy_from_slice(&origins);
        } else {
            let delta = edges.len() as i64 - range.len() as i64;
            self.edges.splice(range.clone(), edges);
            self.edge_origin.splice(range, origins);
            for start in &mut self.edge_start[id.0 as usize + 1..] {
                *start = (i64::from(*start) + delta) as u32;
            }
        }
        Ok(Some(previous))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::Arc;

    use chrono::{TimeZone, Utc};

    use crate::catalog::{self, pattern};
    use crate::lattice::{Lattice, Resolution, ViewId};

    const PROJECT: &str = r#"
[[view]]
name = "t.raw/Day"
time = { frequency = "1d", initial = "2015-01-01" }

[[view]]
name = "t.mart/Newest"
parameters = [{ name = "k" }]

[[view.dependency]]
view = "t.raw/Day"
time = "latest(0)"

[[view]]
name = "t.mart/Fixed"

[[view.dependency]]
view = "t.raw/Day"
time = "latest(0)"

[[view.dependency]]
name = "first"
view = "t.mart/Newest"
parameters = { k = "x" }
"#;

    #[test]
    fn latest_resolved_again_keeps_every_other_view_s_edges() {
        let catalog = catalog::parse(PROJECT, std::path::Path::new("/p")).unwrap();
        let mut lattice = Lattice::new(Arc::new(catalog));
        // Days up to `newest` have data, as of 2015-01-10.
        let newest = Cell::new(Some(2i64));
        let exists = |lattice: &Lattice, view: &super::ResolvedView| {
            lattice.catalog.get(view.view_type).name == "t.raw/Day" && newest.get().is_some_and(|n| view.instance <= n)
        };
        let at = Utc.with_ymd_and_hms(2015, 1, 10, 0, 0, 0).unwrap();
        let resolution = Resolution { evaluation_time: at, exists: &exists };
        let views = lattice.instantiate(&pattern::parse("t.mart/Newest/e(a,b)").unwrap(), &resolution).unwrap();
        let fixed = lattice.instantiate(&pattern::parse("t.mart/Fixed").unwrap(), &resolution).unwrap()[0];
        let edges = |lattice: &Lattice, id: ViewId| -> Vec<String> {
            lattice.dependencies(id).iter().map(|&d| lattice.url_path(d)).collect()
        };
        let fixed_before = edges(&lattice, fixed);
        assert_eq!(edges(&lattice, views[0]), ["t.raw/Day/2015/01/03"]);

        // Unchanged: nothing to do.
        assert_eq!(lattice.reresolve_latest(views[0], &resolution).unwrap(), None);
        // A newer day: written over its range, a view new to the lattice.
        newest.set(Some(4));
        let previous = lattice.reresolve_latest(views[0], &resolution).unwrap().unwrap();
        assert_eq!(lattice.url_path(previous[0]), "t.raw/Day/2015/01/03");
        assert_eq!(edges(&lattice, views[0]), ["t.raw/Day/2015/01/05"]);
        assert_eq!(edges(&lattice, views[1]), ["t.raw/Day/2015/01/03"], "another view kept its edges");
        // No day at all: the range shrinks, later views' ranges move.
        newest.set(None);
        lattice.reresolve_latest(views[0], &resolution).unwrap().unwrap();
        assert!(edges(&lattice, views[0]).is_empty());
        assert_eq!(lattice.unsatisfied(views[0]), ["day"]);
        assert_eq!(edges(&lattice, views[1]), ["t.raw/Day/2015/01/03"]);
        assert_eq!(edges(&lattice, fixed), fixed_before);
        // And back: it grows again.
        newest.set(Some(0));
        lattice.reresolve_latest(views[0], &resolution).unwrap().unwrap();
        assert_eq!(edges(&lattice, views[0]), ["t.raw/Day/2015/01/01"]);
        assert!(lattice.unsatisfied(views[0]).is_empty());
        assert_eq!(edges(&lattice, views[1]), ["t.raw/Day/2015/01/03"]);
        assert_eq!(edges(&lattice, fixed), fixed_before);
        for id in lattice.ids() {
            assert!(lattice.dependencies(id).iter().all(|d| (d.0 as usize) < lattice.len()));
        }
        // A view without latest() declarations is never resolved again.
        assert!(!lattice.has_latest(previous[0]));
        assert_eq!(lattice.reresolve_latest(previous[0], &resolution).unwrap(), None);
    }
}
