//! A view's edges: its dependencies, grouped by the declaration they come
//! from, and the closure of a set of views.

use super::{Lattice, ViewId};

impl Lattice {
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

    /// The names of the dependencies of `id` that are missing: each
    /// `latest(n)` that found no instance with data when the view was
    /// last resolved (once per parameter tuple). They count as dependencies
    /// without data: a view whose every dependency is missing or without
    /// data has none itself, never an empty success.
    pub fn unsatisfied(&self, id: ViewId) -> Vec<&str> {
        let from = self.unsatisfied.partition_point(|(view, _)| *view < id);
        let declarations = &self.view_type(id).dependencies;
        self.unsatisfied[from..]
            .iter()
            .take_while(|(view, _)| *view == id)
            .map(|&(_, origin)| declarations[origin as usize].name.as_str())
            .collect()
    }

    /// Whether some dependency of `id` is missing ([`Lattice::unsatisfied`]).
    pub fn has_unsatisfied(&self, id: ViewId) -> bool {
        let from = self.unsatisfied.partition_point(|(view, _)| *view < id);
        self.unsatisfied.get(from).is_some_and(|(view, _)| *view == id)
    }

    /// The dependencies of `id` that its `latest(n)` declarations resolved
    /// to, in declaration order: the instances it reads.
    pub fn latest_dependencies(&self, id: ViewId) -> Vec<ViewId> {
        let declarations = &self.view_type(id).dependencies;
        let range = self.edge_range(id);
        self.edges[range.clone()]
            .iter()
            .zip(&self.edge_origin[range])
            .filter(|(_, origin)| declarations[**origin as usize].time.looks_for_data())
            .map(|(edge, _)| *edge)
            .collect()
    }

    pub(super) fn edge_range(&self, id: ViewId) -> std::ops::Range<usize> {
        let index = id.0 as usize;
        let start = self.edge_start[index] as usize;
        let end = self.edge_start.get(index + 1).map_or(self.edges.len(), |&end| end as usize);
        start..end
    }
}
