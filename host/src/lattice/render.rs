//! What a view looks like from outside, rendered on demand: its URL path,
//! data path and done flag, and its transformation's configuration.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use super::resolve::ResolvedView;
use super::{Lattice, ViewId};
use crate::catalog::{TIME_VARIABLES, Transformation, ViewType, expression};

impl Lattice {
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

    /// Where the view's data lives: its type's path template under its
    /// storage root (the type's own, else the project's).
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
        self.catalog.storage_root(view_type).join(relative)
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
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use chrono::Utc;

    use crate::catalog::{self, pattern};
    use crate::lattice::{Lattice, Resolution};

    /// Data paths go under the type's root: its own when it has one (here
    /// on S3, which only renders, never opens), else the project's.
    #[test]
    fn data_paths_are_rendered_under_each_types_root() {
        let project = "[project]\nstorage = \"s3://views/proj\"\n\n[[view]]\nname = \"t.raw/In\"\n\
                       parameters = [{ name = \"shop\" }]\nstorage = \"s3://raw-deliveries\"\n\n\
                       [[view]]\nname = \"t.mart/Out\"\nparameters = [{ name = \"shop\" }]\n\n\
                       [[view.dependency]]\nview = \"t.raw/In\"\n";
        let catalog = catalog::parse(project, Path::new("/p")).unwrap();
        let mut lattice = Lattice::new(std::sync::Arc::new(catalog));
        let resolution = Resolution { evaluation_time: Utc::now(), exists: &|_, _| false };
        let out = lattice.instantiate(&pattern::parse("t.mart/Out/SHOP10").unwrap(), &resolution).unwrap()[0];
        let input = lattice.dependencies(out)[0];
        assert_eq!(lattice.data_path(out), PathBuf::from("s3://views/proj/t/mart/Out/SHOP10"));
        assert_eq!(lattice.done_flag_path(out), PathBuf::from("s3://views/proj/t/mart/Out/SHOP10/_SUCCESS"));
        assert_eq!(lattice.data_path(input), PathBuf::from("s3://raw-deliveries/t/raw/In/SHOP10"));
        assert_eq!(lattice.data_path(out).to_str(), Some("s3://views/proj/t/mart/Out/SHOP10"));
    }
}
