//! Path templates: the default one, and the checks that give every view a
//! directory of its own inside the storage root, both within one view type
//! and between view types.

use super::{Checker, Diagnostic};
use crate::catalog::template::Template;
use crate::catalog::{Parameter, TIME_VARIABLES, ViewType};

impl Checker<'_> {
    /// Every view must get a path of its own, inside the storage root.
    pub(super) fn check_path(
        &mut self,
        name: &str,
        path: &Template,
        text: &str,
        at: usize,
        parameters: &[Parameter],
        depth: usize,
    ) {
        for variable in path.variables() {
            let is_parameter = parameters.iter().any(|p| p.name == variable);
            let time_level = TIME_VARIABLES.iter().position(|t| *t == variable);
            match time_level {
                _ if is_parameter => {}
                Some(level) if level < depth => {}
                Some(_) => {
                    self.error(at, format!("{name}: path uses ${{{variable}}}, finer than the view type's frequency"))
                }
                None => self.error(at, format!("{name}: path uses ${{{variable}}}, which is not a parameter")),
            }
        }
        let used: Vec<&str> = path.variables().collect();
        let missing: Vec<&str> = parameters
            .iter()
            .map(|p| p.name.as_str())
            .chain(TIME_VARIABLES[..depth].iter().copied())
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
    /// inside the other. Components with variables match anything.
    pub(super) fn check_distinct_paths(&mut self, types: &[ViewType]) {
        let shapes: Vec<Vec<Option<String>>> = types.iter().map(|t| path_shape(&t.path)).collect();
        for (i, a) in shapes.iter().enumerate() {
            for (j, b) in shapes.iter().enumerate().skip(i + 1) {
                let overlap = a.iter().zip(b).all(|(x, y)| match (x, y) {
                    (Some(x), Some(y)) => x == y,
                    _ => true,
                });
                if overlap {
                    let (first, second) = (&types[i], &types[j]);
                    self.diagnostics.push(Diagnostic {
                        line: Some(second.line),
                        message: format!(
                            "{} and {} could share data: paths `{}` and `{}` overlap; give each its own directory",
                            first.name, second.name, first.path, second.path
                        ),
                    });
                }
            }
        }
    }
}

/// A path template's components: `Some(text)` for a fixed one, `None` for
/// one that holds a variable.
fn path_shape(path: &Template) -> Vec<Option<String>> {
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
