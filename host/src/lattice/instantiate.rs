//! Adding the views a pattern or URL path addresses: their values read and
//! checked, then their dependencies resolved; a failure undoes the call.

use super::{Error, Lattice, PATTERN_LIMIT, Resolution, ViewId};
use crate::catalog::pattern::Pattern;
use crate::catalog::{ParameterKind, ViewType};

impl Lattice {
    /// The views a pattern addresses, added with all their dependencies.
    pub fn instantiate(&mut self, pattern: &Pattern, resolution: &Resolution<'_>) -> Result<Vec<ViewId>, Error> {
        let count = pattern.count().saturating_mul(pattern.view_types.len());
        let limit = self.capacity.per_call.min(PATTERN_LIMIT);
        if count > limit {
            return Err(Error::TooMany { count, limit });
        }
        // Its own handle on the catalog: the types found are used while views are added.
        let catalog = self.catalog.clone();
        let mut types = Vec::new();
        for short in &pattern.view_types {
            let name = format!("{}/{short}", pattern.package);
            let view_type = catalog.find(&name).ok_or_else(|| Error::UnknownViewType {
                closest: catalog.closest(&name).into_iter().map(String::from).collect(),
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
                    self.within_capacity(mark)?;
                }
            }
            self.resolve_pending(resolution, mark)?;
            Ok(addressed)
        })();
        if result.is_err() {
            self.rollback(mark);
        }
        result
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
pub(super) fn check_value(
    view_type: &ViewType,
    parameter: &str,
    kind: ParameterKind,
    value: &str,
) -> Result<String, Error> {
    let refused = |reason: String| Error::BadValue {
        view_type: view_type.name.clone(),
        parameter: parameter.to_string(),
        value: value.escape_debug().to_string(),
        reason,
    };
    let canonical = crate::catalog::canonical_value(kind, value).map_err(|reason| refused(reason.to_string()))?;
    // A value outside those declared names a view that cannot exist.
    if let Some(values) = view_type.parameters.iter().find(|p| p.name == parameter).and_then(|p| p.values.as_ref()) {
        values.check(&canonical).map_err(refused)?;
    }
    Ok(canonical)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use crate::catalog::{self, pattern};
    use crate::lattice::{Lattice, Resolution};

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
        let mut lattice = Lattice::new(std::sync::Arc::new(catalog));
        let good = lattice.instantiate(&pattern::parse("t.a/Label/7").unwrap(), &resolution()).unwrap();
        assert_eq!(lattice.len(), 2);
        let error = lattice.instantiate(&pattern::parse("t.a/Label/e(8,abc)").unwrap(), &resolution()).unwrap_err();
        let said = "t.a/Label/abc: dependency `count`: t.a/Count: parameter n = `abc`: not an int";
        assert_eq!(error.to_string(), said);
        // As the CLI prints it, with its chain of causes: said once.
        assert_eq!(format!("{:#}", anyhow::Error::from(error)), said);
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

    #[test]
    fn capacity_counts_dependencies_and_what_the_lattice_holds() {
        use crate::lattice::{Capacity, Error};
        let catalog = catalog::parse(PROJECT, std::path::Path::new("/p")).unwrap();
        let mut lattice = Lattice::new(std::sync::Arc::new(catalog));
        lattice.set_capacity(Capacity { per_call: 3, total: 5 });
        // Two labels name two views, but bring two counts with them.
        let error = lattice.instantiate(&pattern::parse("t.a/Label/e(1,2)").unwrap(), &resolution()).unwrap_err();
        assert_eq!(error, Error::TooManyWithDependencies { limit: 3 });
        assert_eq!(lattice.len(), 0, "views of the refused call were kept");
        assert_eq!((lattice.params.len(), lattice.params_index.len()), (0, 0), "its parameter tuples were kept");
        lattice.instantiate(&pattern::parse("t.a/Label/1").unwrap(), &resolution()).unwrap();
        lattice.instantiate(&pattern::parse("t.a/Label/2").unwrap(), &resolution()).unwrap();
        assert_eq!(lattice.len(), 4);
        // Views it holds cost nothing; a fifth and sixth view are one too many.
        lattice.instantiate(&pattern::parse("t.a/Label/e(1,2)").unwrap(), &resolution()).unwrap();
        let error = lattice.instantiate(&pattern::parse("t.a/Label/3").unwrap(), &resolution()).unwrap_err();
        assert_eq!(error, Error::Full { held: 4, limit: 5 });
        assert_eq!(error.to_string(), "the lattice would grow past its limit of 5 views (it holds 4)");
        assert_eq!(lattice.len(), 4);
        lattice.instantiate(&pattern::parse("t.a/Count/3").unwrap(), &resolution()).unwrap();
        assert_eq!(lattice.len(), 5);
    }
}
