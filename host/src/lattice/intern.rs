//! The interned store of views: adding a view (its parameter tuple shared
//! by every view with the same values), forgetting what was added since a
//! mark, and the memory it takes.

use super::{Capacity, Error, Lattice, ParamsId, ViewId, ViewKey};
use crate::catalog::ViewTypeId;

/// How far the lattice had grown, for [`Lattice::rollback`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    views: usize,
    edges: usize,
    params: usize,
}

impl Lattice {
    pub(super) fn intern(&mut self, view_type: ViewTypeId, params: Vec<String>, instance: i64) -> ViewId {
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

    /// Where the lattice stands, to undo a failed instantiation.
    pub(super) fn mark(&self) -> Mark {
        Mark { views: self.views.len(), edges: self.edges.len(), params: self.params.len() }
    }

    /// Whether the views added since `mark` keep within the lattice's capacity.
    pub(super) fn within_capacity(&self, Mark { views: before, .. }: Mark) -> Result<(), Error> {
        let Capacity { per_call, total } = self.capacity;
        // A call too big on its own is the caller's to fix, whatever the lattice holds.
        if self.views.len() - before > per_call {
            return Err(Error::TooManyWithDependencies { limit: per_call });
        }
        if self.views.len() > total {
            return Err(Error::Full { held: before, limit: total });
        }
        Ok(())
    }

    /// Forgets every view added since `mark`, and the parameter tuples
    /// interned for them, so that a failed (or refused) instantiation
    /// leaves nothing behind: neither half-resolved views nor memory.
    pub(super) fn rollback(&mut self, Mark { views, edges, params }: Mark) {
        for key in self.views.drain(views..) {
            self.index.remove(&key);
        }
        for tuple in self.params.drain(params..) {
            self.params_index.remove(&tuple);
        }
        self.edge_start.truncate(views);
        self.edges.truncate(edges);
        self.edge_origin.truncate(edges);
        let kept = self.unsatisfied.partition_point(|(id, _)| (id.0 as usize) < views);
        self.unsatisfied.truncate(kept);
        self.resolved = views;
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
            + self.unsatisfied.capacity() * size_of::<(ViewId, u16)>()
            + 2 * params
    }
}
