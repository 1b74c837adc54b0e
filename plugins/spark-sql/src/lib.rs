//! `spark-sql`: a view's data is the result of a Spark SQL query over its
//! inputs, each dependency a table by its name. The plugin only describes
//! the job; the host's Spark driver runs it. Configuration:
//! - `query`: the SQL, inline; or
//! - `query-file`: the name of one of the view type's `resources` holding it
//!   (a resource, so that editing the file changes the version checksum).
//!
//! Exactly one of the two. A final `;` and trailing whitespace are trimmed,
//! as Spark refuses a trailing semicolon. `files` and `conf` are the SDK's
//! (see `Job::with_config_options`).

use trellis_plugin_sdk::{
    ConfigKey, EngineRequest, EngineTransformation, Failure, Job, PluginInfo, export_engine_transformation,
    trim_sql_statement,
};

struct SparkSql;

impl EngineTransformation for SparkSql {
    fn describe() -> PluginInfo {
        PluginInfo::new("spark-sql", env!("CARGO_PKG_VERSION"))
            .description("a Spark SQL query over the inputs, each dependency a table by its name")
            .config_key(ConfigKey::optional(
                "query",
                "the SQL query, inline; each dependency is a table by its name (give this or `query-file`)",
            ))
            .config_key(ConfigKey::optional(
                "query-file",
                "the name of one of the view type's `resources` that holds the SQL query (give this or `query`)",
            ))
            .job_config_keys()
    }

    fn job(request: EngineRequest) -> Result<Job, Failure> {
        let config = request.config();
        let (text, source) = match (config.get("query"), config.get("query-file")) {
            (Some(query), None) => (query, "`query`".to_string()),
            (None, Some(file)) => (request.resource_text(file)?, format!("query file `{file}`")),
            (Some(_), Some(_)) => {
                return Err(Failure::fatal("give the SQL as `query` or as `query-file`, not both"));
            }
            (None, None) => {
                return Err(Failure::fatal(
                    "no SQL: give the query as `query`, or name the resource that holds it as `query-file`",
                ));
            }
        };
        let query = trim_sql_statement(text);
        if query.is_empty() {
            return Err(Failure::fatal(format!("{source} holds no SQL query")));
        }
        Job::sql(query).with_config_options(&config)
    }
}

export_engine_transformation!(SparkSql);
