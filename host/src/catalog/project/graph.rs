//! The type-level dependency graph: no cycle, except a type that depends on
//! its own past.

use super::{Checker, Diagnostic};
use crate::catalog::{TimeSelection, ViewType};

impl Checker<'_> {
    /// Type-level cycles are errors, except a type depending on its own
    /// past (`current(-1)`: yesterday's snapshot), which ends at the
    /// initial instance.
    pub(super) fn check_cycles(&mut self, types: &[ViewType]) {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Active,
            Done,
        }
        fn visit(at: usize, types: &[ViewType], marks: &mut [Mark], stack: &mut Vec<usize>) -> Option<Vec<usize>> {
            marks[at] = Mark::Active;
            stack.push(at);
            for dependency in &types[at].dependencies {
                let next = dependency.target.0 as usize;
                let into_the_past = matches!(dependency.time, TimeSelection::Current { to, .. } if to < 0);
                if next == at && into_the_past {
                    continue;
                }
                match marks[next] {
                    Mark::Active => {
                        let start = stack.iter().position(|&s| s == next).unwrap_or(0);
                        let mut cycle = stack[start..].to_vec();
                        cycle.push(next);
                        return Some(cycle);
                    }
                    Mark::New => {
                        if let Some(cycle) = visit(next, types, marks, stack) {
                            return Some(cycle);
                        }
                    }
                    Mark::Done => {}
                }
            }
            stack.pop();
            marks[at] = Mark::Done;
            None
        }
        let mut marks = vec![Mark::New; types.len()];
        for start in 0..types.len() {
            if marks[start] != Mark::New {
                continue;
            }
            if let Some(cycle) = visit(start, types, &mut marks, &mut Vec::new()) {
                let names: Vec<&str> = cycle.iter().map(|&i| types[i].name.as_str()).collect();
                let line = Some(types[cycle[0]].line);
                self.diagnostics.push(Diagnostic {
                    file: types[cycle[0]].file.clone(),
                    line,
                    message: format!("dependency cycle: {}", names.join(" -> ")),
                    plugin: None,
                });
                return;
            }
        }
    }
}
