//! The `engine-transformation` world (contract 1.2.0): a transformation type
//! whose views an engine such as Spark computes. The plugin computes nothing
//! itself: it describes a [`Job`] from the request, and the host's engine
//! driver runs it.

use std::marker::PhantomData;

use crate::bindings::engine::exports::trellis::plugin::engine_job as wit;
use crate::{Config, ConfigKey, Failure, PluginInfo};

/// One materialized dependency of the view: its name, view, format and fields.
pub use wit::Input as EngineInput;
/// The job that materializes a view: engine, application, arguments, engine
/// properties and how many files to write. Build one with [`Job::sql`] or
/// [`Job::python`].
pub use wit::JobSpec as Job;
/// A file of the project that the view type lists in `resources`, loaded.
pub use wit::NamedResource as EngineResource;
/// What [`EngineTransformation::job`] is given: the view, its inputs, its
/// configuration and its type's `resources`.
pub use wit::Request as EngineRequest;
pub use wit::{Application, Field};

// The configuration keys `Job::with_config_options` reads and
// `PluginInfo::job_config_keys` declares: one spelling for both.
const FILES_KEY: &str = "files";
const CONF_KEY: &str = "conf";

/// An engine-backed transformation type. Each call gets a fresh instance
/// and no directories at all: everything the job needs, query files and
/// applications included, is in the [`EngineRequest`].
pub trait EngineTransformation {
    /// Who the plugin is and which configuration keys it reads.
    fn describe() -> PluginInfo;

    /// The job that materializes `request.view`. A [`Failure::Retryable`]
    /// is retried with backoff; a [`Failure::Fatal`] fails the view at once.
    fn job(request: EngineRequest) -> Result<Job, Failure>;
}

impl EngineRequest {
    /// The resolved configuration.
    pub fn config(&self) -> Config<'_> {
        Config::new(&self.config)
    }

    /// The resource called `name`, if the view type lists it in `resources`.
    pub fn resource(&self, name: &str) -> Option<&EngineResource> {
        self.resources.iter().find(|resource| resource.name == name)
    }

    /// The resource called `name`, or a fatal failure that names it and the
    /// resources there are, so that a typo is plain to see.
    pub fn require_resource(&self, name: &str) -> Result<&EngineResource, Failure> {
        self.resource(name).ok_or_else(|| {
            if self.resources.is_empty() {
                return Failure::fatal(format!("no resource `{name}`: this view type lists no `resources`"));
            }
            let known: Vec<String> = self.resources.iter().map(|resource| format!("`{}`", resource.name)).collect();
            Failure::fatal(format!("no resource `{name}`: this view type's `resources` are {}", known.join(", ")))
        })
    }

    /// The text of the resource called `name` (a query file...), or a fatal
    /// failure when there is no such resource or it is not UTF-8.
    pub fn resource_text(&self, name: &str) -> Result<&str, Failure> {
        let resource = self.require_resource(name)?;
        std::str::from_utf8(&resource.content)
            .map_err(|e| Failure::fatal(format!("resource `{name}` is not UTF-8 text: {e}")))
    }

    /// The dependency names, each once, in request order: the tables a SQL
    /// query can read (a dependency on several views is one table).
    pub fn input_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for input in &self.inputs {
            if !names.contains(&input.name.as_str()) {
                names.push(&input.name);
            }
        }
        names
    }
}

impl Job {
    /// A Spark SQL job: each dependency name is a table over all of its
    /// views' data, and the query's result is the view's data. The query is
    /// passed as it is: see [`trim_sql_statement`] for text a user wrote.
    pub fn sql(query: impl Into<String>) -> Job {
        Job::spark(Application::Sql(query.into()))
    }

    /// A PySpark job: `resource_name` names one of the view type's
    /// `resources` (so that the application is part of the version
    /// checksum), which runs as Spark's main program.
    pub fn python(resource_name: impl Into<String>) -> Job {
        Job::spark(Application::Python(resource_name.into()))
    }

    fn spark(application: Application) -> Job {
        Job { engine: "spark".into(), application, arguments: Vec::new(), conf: Vec::new(), output_files: 0 }
    }

    /// Appends an argument of the application (a Python application's
    /// `sys.argv[1:]`).
    pub fn argument(mut self, argument: impl Into<String>) -> Self {
        self.arguments.push(argument.into());
        self
    }

    pub fn arguments(mut self, arguments: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.arguments.extend(arguments.into_iter().map(Into::into));
        self
    }

    /// Sets an engine property for this job, over the project's
    /// `[engines.<engine>] conf`; set again, the later value wins (a
    /// view type's `conf` over the plugin's own defaults).
    pub fn conf(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let (key, value) = (key.into(), value.into());
        match self.conf.iter_mut().find(|(existing, _)| *existing == key) {
            Some(existing) => existing.1 = value,
            None => self.conf.push((key, value)),
        }
        self
    }

    /// How many files the view's data is written as; 0 leaves it to the engine.
    pub fn output_files(mut self, count: u32) -> Self {
        self.output_files = count;
        self
    }

    /// Applies the configuration keys every engine plugin offers, as
    /// [`PluginInfo::job_config_keys`] declares them: `files` (default 1)
    /// and `conf` (comma-separated `key=value` engine properties). A bad
    /// value is a fatal failure that names it.
    pub fn with_config_options(self, config: &Config<'_>) -> Result<Job, Failure> {
        let files = match config.get(FILES_KEY) {
            None => 1,
            Some(value) => value.trim().parse::<u32>().map_err(|_| {
                Failure::fatal(format!(
                    "`{FILES_KEY}` must be a number of output files (0 leaves it to the engine), not `{value}`"
                ))
            })?,
        };
        let properties = parse_conf(&self.engine, config.list(CONF_KEY))?;
        let mut job = self.output_files(files);
        for (key, value) in properties {
            job = job.conf(key, value);
        }
        Ok(job)
    }
}

/// `key=value` pairs whose keys are properties of `engine` (`spark.*`).
fn parse_conf(engine: &str, pairs: Vec<&str>) -> Result<Vec<(String, String)>, Failure> {
    let prefix = format!("{engine}.");
    pairs
        .into_iter()
        .map(|pair| {
            let Some((key, value)) = pair
                .split_once('=')
                .map(|(key, value)| (key.trim(), value.trim()))
                .filter(|(key, value)| !key.is_empty() && !value.is_empty())
            else {
                return Err(Failure::fatal(format!("`{CONF_KEY}`: `{pair}` is not a `key=value` pair")));
            };
            if !key.starts_with(&prefix) || key.len() == prefix.len() {
                return Err(Failure::fatal(format!(
                    "`{CONF_KEY}`: `{key}` is not a property of {engine}: its keys start with `{prefix}`"
                )));
            }
            Ok((key.to_string(), value.to_string()))
        })
        .collect()
}

impl PluginInfo {
    /// Declares `files` and `conf`, the keys [`Job::with_config_options`] reads.
    pub fn job_config_keys(self) -> Self {
        self.config_key(ConfigKey::optional(
            FILES_KEY,
            "how many files the view's data is written as (default 1; 0 leaves it to Spark)",
        ))
        .config_key(ConfigKey::optional(
            CONF_KEY,
            "Spark properties for this job, over the project's [engines.spark] conf: comma-separated \
             key=value pairs, e.g. spark.sql.shuffle.partitions=4",
        ))
    }
}

/// A SQL statement as a user wrote it, without what Spark refuses after it:
/// trailing whitespace and one final `;`. Empty when nothing else is left.
pub fn trim_sql_statement(text: &str) -> &str {
    let text = text.trim_end();
    text.strip_suffix(';').unwrap_or(text).trim_end()
}

#[doc(hidden)]
pub struct EngineExport<T>(PhantomData<T>);

impl<T: EngineTransformation> wit::Guest for EngineExport<T> {
    fn describe() -> PluginInfo {
        crate::set_panic_hook();
        T::describe()
    }

    fn job(request: EngineRequest) -> Result<Job, wit::Failure> {
        crate::set_panic_hook();
        // Plugin authors use the one `Failure` of the SDK; the interface has
        // its own, so that it can be generated apart.
        T::job(request).map_err(|failure| match failure {
            Failure::Retryable(message) => wit::Failure::Retryable(message),
            Failure::Fatal(message) => wit::Failure::Fatal(message),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, view: &str) -> EngineInput {
        EngineInput {
            name: name.into(),
            view: view.into(),
            format: "csv".into(),
            fields: vec![Field { name: "id".into(), kind: "long".into() }],
            timestamp: None,
            changed: true,
        }
    }

    fn request(resources: Vec<EngineResource>) -> EngineRequest {
        EngineRequest {
            view: "shop.mart/Daily/2015/05/01".into(),
            parameters: vec![],
            nominal_time: None,
            actual_time: 0,
            config: vec![("query".into(), "select 1".into())],
            inputs: vec![
                input("orders", "shop.raw/Orders/A"),
                input("shops", "shop.raw/Shops"),
                input("orders", "shop.raw/Orders/B"),
            ],
            format: "parquet".into(),
            fields: vec![],
            resources,
        }
    }

    fn resource(name: &str, content: &[u8]) -> EngineResource {
        EngineResource { name: name.into(), content: content.to_vec() }
    }

    fn fatal(message: &str) -> Failure {
        Failure::Fatal(message.into())
    }

    #[test]
    fn resources_are_found_by_name_and_read_as_text() {
        let with_resources = request(vec![resource("daily.sql", b"select 1;"), resource("bad.sql", &[0xff, 0xfe])]);
        assert_eq!(with_resources.config().get("query"), Some("select 1"));
        assert_eq!(with_resources.resource("daily.sql").map(|r| r.content.len()), Some(9));
        assert_eq!(with_resources.resource_text("daily.sql"), Ok("select 1;"));
        assert_eq!(
            with_resources.resource_text("dialy.sql"),
            Err(fatal("no resource `dialy.sql`: this view type's `resources` are `daily.sql`, `bad.sql`"))
        );
        let not_text = with_resources.resource_text("bad.sql").unwrap_err();
        assert!(not_text.message().starts_with("resource `bad.sql` is not UTF-8 text: "), "{not_text:?}");
        assert_eq!(
            request(vec![]).resource_text("daily.sql"),
            Err(fatal("no resource `daily.sql`: this view type lists no `resources`"))
        );
    }

    #[test]
    fn input_names_are_distinct_and_in_order() {
        assert_eq!(request(vec![]).input_names(), ["orders", "shops"]);
    }

    #[test]
    fn jobs_are_built_step_by_step() {
        let job = Job::python("app.py")
            .argument("--day")
            .arguments(["2015-05-01", "x"])
            .conf("spark.executor.memory", "2g")
            .output_files(3);
        assert_eq!(job.engine, "spark");
        assert_eq!(job.application, Application::Python("app.py".into()));
        assert_eq!(job.arguments, ["--day", "2015-05-01", "x"]);
        assert_eq!(job.conf, [("spark.executor.memory".to_string(), "2g".to_string())]);
        assert_eq!(job.output_files, 3);
        let sql = Job::sql("select 1");
        assert_eq!(sql.application, Application::Sql("select 1".into()));
        assert!(sql.arguments.is_empty() && sql.conf.is_empty() && sql.output_files == 0);
    }

    fn configured(entries: &[(&str, &str)]) -> Result<Job, Failure> {
        let entries: Vec<(String, String)> = entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Job::sql("select 1").with_config_options(&Config::new(&entries))
    }

    #[test]
    fn config_options_set_files_and_conf() {
        let default = configured(&[]).unwrap();
        assert_eq!((default.output_files, default.conf.len()), (1, 0));
        let job =
            configured(&[("files", " 0 "), ("conf", "spark.sql.shuffle.partitions=4, spark.x.y = a=b ,")]).unwrap();
        assert_eq!(job.output_files, 0);
        assert_eq!(
            job.conf,
            [
                ("spark.sql.shuffle.partitions".to_string(), "4".to_string()),
                ("spark.x.y".to_string(), "a=b".to_string())
            ]
        );
    }

    #[test]
    fn bad_config_options_are_fatal_and_named() {
        for files in ["-1", "two", "", "1.5"] {
            assert_eq!(
                configured(&[("files", files)]).unwrap_err(),
                fatal(&format!("`files` must be a number of output files (0 leaves it to the engine), not `{files}`"))
            );
        }
        for pair in ["spark.sql.shuffle.partitions", "=4", "spark.a="] {
            assert_eq!(
                configured(&[("conf", pair)]).unwrap_err(),
                fatal(&format!("`conf`: `{pair}` is not a `key=value` pair"))
            );
        }
        for key in ["executor.memory", "spark."] {
            assert_eq!(
                configured(&[("conf", &format!("{key}=2g"))]).unwrap_err(),
                fatal(&format!("`conf`: `{key}` is not a property of spark: its keys start with `spark.`"))
            );
        }
    }

    #[test]
    fn job_config_keys_declare_what_with_config_options_reads() {
        let info = PluginInfo::new("p", "1").job_config_keys();
        let names: Vec<&str> = info.config.iter().map(|key| key.name.as_str()).collect();
        assert_eq!(names, [FILES_KEY, CONF_KEY]);
        assert!(info.config.iter().all(|key| !key.required));
    }

    #[test]
    fn sql_statements_lose_a_final_semicolon_and_trailing_whitespace() {
        assert_eq!(trim_sql_statement("select 1 ;\n\n"), "select 1");
        assert_eq!(trim_sql_statement("  select ';'"), "  select ';'");
        assert_eq!(trim_sql_statement("select 1;;"), "select 1;");
        assert_eq!(trim_sql_statement(" ; \n"), "");
    }
}
