//! Path templates: the default one, and the checks that give every view a
//! directory of its own inside the storage root, both within one view type
//! and between view types.

use std::path::Path;

use super::{Checker, Diagnostic};
use crate::catalog::template::Template;
use crate::catalog::{Parameter, TIME_VARIABLES, ViewType};

impl Checker<'_> {
    /// Every view must get a path of its own, inside the storage root.
    /// `depth` is how many time variables the type's frequency gives, or
    /// `None` when its time is invalid: that is reported already, and the
    /// path's time variables are not checked against a guess.
    pub(super) fn check_path(
        &mut self,
        name: &str,
        path: &Template,
        text: &str,
        at: usize,
        parameters: &[Parameter],
        depth: Option<usize>,
    ) {
        for variable in path.variables() {
            let is_parameter = parameters.iter().any(|p| p.name == variable);
            let time_level = TIME_VARIABLES.iter().position(|t| *t == variable);
            match (time_level, depth) {
                _ if is_parameter => {}
                (Some(_), None) => {}
                (Some(level), Some(depth)) if level < depth => {}
                (Some(_), Some(_)) => {
                    self.error(at, format!("{name}: path uses ${{{variable}}}, finer than the view type's frequency"))
                }
                (None, _) => self.error(at, format!("{name}: path uses ${{{variable}}}, which is not a parameter")),
            }
        }
        let used: Vec<&str> = path.variables().collect();
        let missing: Vec<&str> = parameters
            .iter()
            .map(|p| p.name.as_str())
            .chain(TIME_VARIABLES[..depth.unwrap_or(0)].iter().copied())
            .filter(|v| !used.contains(v))
            .collect();
        if !missing.is_empty() {
            let missing: Vec<String> = missing.iter().map(|v| format!("${{{v}}}")).collect();
            self.error(
                at,
                format!("{name}: path `{text}` must use {} so that every view has its own path", missing.join(", ")),
            );
        }
        let literal_parts = path.render(|_| Some("x"));
        if literal_parts.starts_with('/') || literal_parts.split('/').any(|part| part == ".." || part == ".") {
            self.error(
                at,
                format!("{name}: path `{text}` must stay inside the storage root (no leading `/`, no `..`)"),
            );
        }
        // Names starting with a dot at the top of the storage root are
        // trellis's own (its staging area, `.trellis-staging`, is emptied at
        // every open): a view there would have its data deleted.
        let first = text.split('/').next().unwrap_or_default();
        if first.starts_with('.') && first != "." && first != ".." {
            self.error(
                at,
                format!(
                    "{name}: path `{text}` may not start with `{first}`: names starting with `.` at the top of the storage root are reserved for trellis"
                ),
            );
        }
        if literal_parts.contains('\\') || literal_parts.chars().any(char::is_control) {
            self.error(
                at,
                format!("{name}: path `{}` may not contain `\\` or control characters", text.escape_debug()),
            );
        }
        let shape = path_shape(path);
        if shape.first().is_none_or(|first| first.is_none()) || shape.iter().any(|c| c == &Some(String::new())) {
            self.error(
                at,
                format!("{name}: path `{text}` must start with a fixed directory name and have no empty components"),
            );
        }
        // A parameter value may hold any character but `/`: next to other
        // text in one component, two different values could give one path.
        for component in text.split('/') {
            let parameter_inside = parameters.iter().any(|p| component.contains(&format!("${{{}}}", p.name)));
            if parameter_inside && !parameters.iter().any(|p| component == format!("${{{}}}", p.name)) {
                self.error(
                    at,
                    format!("{name}: path component `{component}` must be a parameter alone, like `${{shop}}`"),
                );
            }
        }
    }

    /// No two view types may have paths that could meet: equal, or one
    /// inside the other. Components with variables match anything. When a
    /// type has a storage root of its own, every path is compared under its
    /// root (`project`'s unless the type has one; `None` when the project's
    /// is refused already), so that roots inside one another are seen too.
    pub(super) fn check_distinct_paths(&mut self, types: &[ViewType], project: Option<&Path>) {
        let own_roots = types.iter().any(|t| t.storage_root.as_deref().is_some_and(|own| Some(own) != project));
        fn root_of<'a>(t: &'a ViewType, project: Option<&'a Path>) -> Option<&'a Path> {
            t.storage_root.as_deref().or(project)
        }
        let shapes: Vec<Shape> = types
            .iter()
            .map(|t| match root_of(t, project) {
                Some(root) if own_roots => root_shape(root).into_iter().chain(path_shape(&t.path)).collect(),
                _ => path_shape(&t.path),
            })
            .collect();
        let overlaps = overlapping_pairs(&shapes, OVERLAPS_LISTED);
        let shown = |t: &ViewType| match root_of(t, project) {
            Some(root) if own_roots => format!("{}/{}", root.display(), t.path),
            _ => t.path.to_string(),
        };
        for &(i, j) in &overlaps.listed {
            let (first, second) = (&types[i], &types[j]);
            self.diagnostics.push(Diagnostic {
                file: second.file.clone(),
                line: Some(second.line),
                message: format!(
                    "{} and {} could share data: paths `{}` and `{}` overlap; give each its own directory",
                    first.name,
                    second.name,
                    shown(first),
                    shown(second)
                ),
                plugin: None,
            });
        }
        let unlisted = overlaps.total - overlaps.listed.len() as u64;
        if unlisted > 0 {
            self.diagnostics.push(Diagnostic {
                file: None,
                line: None,
                message: format!("and {unlisted} more pairs of view types whose paths overlap"),
                plugin: None,
            });
        }
    }
}

/// How many overlapping pairs are listed one by one; the rest are counted.
/// Their number can grow with the square of the types (a thousand types on
/// one path are half a million pairs), and past this a list helps nobody.
const OVERLAPS_LISTED: usize = 100;

/// A path template's components: `Some(text)` for a fixed one, `None` for
/// one that holds a variable, which matches anything.
type Shape = Vec<Option<String>>;

/// Pairs of shapes that overlap.
#[derive(Debug, PartialEq, Eq)]
struct Overlaps {
    /// `(i, j)` with `i < j`, in that order; at most the limit asked.
    listed: Vec<(usize, usize)>,
    total: u64,
}

/// What is left to compare: shapes equal on every component before `depth`
/// (a variable matching anything), among themselves or one group against
/// another.
enum Task {
    Within(Vec<usize>, usize),
    Across(Vec<usize>, Vec<usize>, usize),
}

/// Every pair of shapes that agree on every component both have: what
/// comparing each pair would find, in the same order, without comparing
/// each pair. Shapes are partitioned component by component: at each depth
/// those that ended there overlap with every shape still in their group;
/// the others split by their fixed component, and the ones with a variable
/// there are compared, as a group of their own, with all the others. For
/// paths whose fixed components tell types apart (any real project's) the
/// groups shrink to one shape within a few components: O(n log n) for n
/// shapes, plus the pairs found. (No algorithm is subquadratic for every
/// input: shapes with variables at many depths encode orthogonal vectors.)
fn overlapping_pairs(shapes: &[Shape], limit: usize) -> Overlaps {
    let mut found = Overlaps { listed: Vec::new(), total: 0 };
    let mut pair = |a: usize, b: usize| {
        found.total += 1;
        if found.listed.len() < limit {
            found.listed.push((a.min(b), a.max(b)));
        }
    };
    let ended = |depth: usize| move |&s: &usize| shapes[s].len() <= depth;
    let mut tasks = vec![Task::Within((0..shapes.len()).collect(), 0)];
    while let Some(task) = tasks.pop() {
        match task {
            Task::Within(group, depth) => {
                if group.len() < 2 {
                    continue;
                }
                let (done, going): (Vec<usize>, Vec<usize>) = group.into_iter().partition(ended(depth));
                for (k, &a) in done.iter().enumerate() {
                    done[k + 1..].iter().chain(&going).for_each(|&b| pair(a, b));
                }
                let (variable, fixed) = split(shapes, going, depth);
                let any_fixed: Vec<usize> = fixed.values().flatten().copied().collect();
                tasks.push(Task::Across(variable.clone(), any_fixed, depth + 1));
                tasks.push(Task::Within(variable, depth + 1));
                tasks.extend(fixed.into_values().map(|group| Task::Within(group, depth + 1)));
            }
            Task::Across(left, right, depth) => {
                if left.is_empty() || right.is_empty() {
                    continue;
                }
                let (left_done, left): (Vec<usize>, Vec<usize>) = left.into_iter().partition(ended(depth));
                let (right_done, right): (Vec<usize>, Vec<usize>) = right.into_iter().partition(ended(depth));
                for &a in &left_done {
                    right_done.iter().chain(&right).for_each(|&b| pair(a, b));
                }
                for &b in &right_done {
                    left.iter().for_each(|&a| pair(a, b));
                }
                let (left_variable, mut left_fixed) = split(shapes, left, depth);
                let (right_variable, right_fixed) = split(shapes, right, depth);
                let left_any_fixed: Vec<usize> = left_fixed.values().flatten().copied().collect();
                let right_all: Vec<usize> =
                    right_variable.iter().chain(right_fixed.values().flatten()).copied().collect();
                tasks.push(Task::Across(left_variable, right_all, depth + 1));
                tasks.push(Task::Across(left_any_fixed, right_variable, depth + 1));
                for (component, right_group) in right_fixed {
                    if let Some(left_group) = left_fixed.remove(component) {
                        tasks.push(Task::Across(left_group, right_group, depth + 1));
                    }
                }
            }
        }
    }
    found.listed.sort_unstable();
    found
}

/// A group's shapes by their component at `depth`: those with a variable
/// there, and the others by its text (ordered, so that what is found first,
/// and listed when there is more than the limit, is the same every time).
fn split(
    shapes: &[Shape],
    group: Vec<usize>,
    depth: usize,
) -> (Vec<usize>, std::collections::BTreeMap<&str, Vec<usize>>) {
    let mut variable = Vec::new();
    let mut fixed: std::collections::BTreeMap<&str, Vec<usize>> = std::collections::BTreeMap::new();
    for s in group {
        match &shapes[s][depth] {
            None => variable.push(s),
            Some(text) => fixed.entry(text.as_str()).or_default().push(s),
        }
    }
    (variable, fixed)
}

/// A storage root's components, every one fixed: `/`, `srv`, `views`, or
/// `s3:`, the bucket and the prefix's components.
fn root_shape(root: &Path) -> Shape {
    root.components().map(|c| Some(c.as_os_str().to_string_lossy().into_owned())).collect()
}

fn path_shape(path: &Template) -> Shape {
    let marked = path.render(|_| Some("\u{1}"));
    marked.split('/').map(|component| (!component.contains('\u{1}')).then(|| component.to_string())).collect()
}

/// `shop/datamart/DailySales/${shop}/${YEAR}/${MONTH}/${DAY}`.
pub(super) fn default_path(name: &str, parameters: &[Parameter], depth: usize) -> String {
    let mut path = name.replacen('.', "/", usize::MAX);
    for parameter in parameters {
        path.push_str(&format!("/${{{}}}", parameter.name));
    }
    for variable in &TIME_VARIABLES[..depth] {
        path.push_str(&format!("/${{{variable}}}"));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The obvious check, which compares every pair: what the partition must
    /// agree with.
    fn every_pair(shapes: &[Shape]) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        for (i, a) in shapes.iter().enumerate() {
            for (j, b) in shapes.iter().enumerate().skip(i + 1) {
                let overlap = a.iter().zip(b).all(|(x, y)| match (x, y) {
                    (Some(x), Some(y)) => x == y,
                    _ => true,
                });
                if overlap {
                    found.push((i, j));
                }
            }
        }
        found
    }

    fn shape(text: &str) -> Shape {
        text.split('/').map(|c| (c != "*").then(|| c.to_string())).collect()
    }

    #[test]
    fn overlaps_are_equal_paths_prefixes_and_variables() {
        let shapes: Vec<Shape> =
            ["a/b/*", "a/b", "a/c/*", "*/c/d", "a/b/x/y", "b/*", "b/x/*/z", "b/y/q/z"].map(shape).to_vec();
        let found = overlapping_pairs(&shapes, usize::MAX);
        assert_eq!(found.listed, [(0, 1), (0, 4), (1, 4), (2, 3), (3, 5), (5, 6), (5, 7)]);
        assert_eq!(found.listed, every_pair(&shapes));
        assert_eq!(found.total, 7);
    }

    #[test]
    fn past_the_limit_overlaps_are_counted_not_listed() {
        let shapes: Vec<Shape> = (0..1000).map(|_| shape("same/*")).collect();
        let found = overlapping_pairs(&shapes, 5);
        assert_eq!(found.listed.len(), 5);
        assert_eq!(found.total, 1000 * 999 / 2);
    }

    /// Path shapes from a small alphabet, so that equal components,
    /// prefixes and variables meet often.
    fn shapes() -> impl Strategy<Value = Vec<Shape>> {
        let component = prop_oneof![
            3 => Just(None),
            2 => Just(Some("a".to_string())),
            2 => Just(Some("b".to_string())),
            1 => Just(Some("c".to_string())),
        ];
        prop::collection::vec(prop::collection::vec(component, 1..6), 0..40)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn the_partition_finds_exactly_what_comparing_every_pair_finds(shapes in shapes()) {
            let found = overlapping_pairs(&shapes, usize::MAX);
            let expected = every_pair(&shapes);
            prop_assert_eq!(found.total, expected.len() as u64);
            prop_assert_eq!(found.listed, expected);
        }

        #[test]
        fn a_limit_lists_only_pairs_that_overlap(shapes in shapes(), limit in 0usize..10) {
            let found = overlapping_pairs(&shapes, limit);
            let expected = every_pair(&shapes);
            prop_assert_eq!(found.total, expected.len() as u64);
            prop_assert_eq!(found.listed.len(), limit.min(expected.len()));
            prop_assert!(found.listed.iter().all(|pair| expected.contains(pair)));
        }
    }
}
