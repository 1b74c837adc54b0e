//! `spark-python`: a view's data is written by the user's own PySpark
//! application, which the host's Spark driver runs as its main program.
//! Configuration:
//! - `application`: the name of one of the view type's `resources`, a `.py`
//!   file (a resource, so that editing it changes the version checksum);
//! - `args`: its arguments (`sys.argv[1:]`), comma-separated.
//!
//! `files` and `conf` are the SDK's (see `Job::with_config_options`).

use trellis_plugin_sdk::{
    ConfigKey, EngineRequest, EngineTransformation, Failure, Job, PluginInfo, export_engine_transformation,
};

struct SparkPython;

impl EngineTransformation for SparkPython {
    fn describe() -> PluginInfo {
        PluginInfo::new("spark-python", env!("CARGO_PKG_VERSION"))
            .description("runs a PySpark application of the project on Spark")
            .config_key(ConfigKey::required(
                "application",
                "the name of one of the view type's `resources`: the PySpark application, a .py file",
            ))
            .config_key(ConfigKey::optional(
                "args",
                "the application's arguments (its sys.argv[1:]), comma-separated; default none",
            ))
            .job_config_keys()
    }

    fn job(request: EngineRequest) -> Result<Job, Failure> {
        let config = request.config();
        let application = config.require("application")?;
        if !application.ends_with(".py") {
            return Err(Failure::fatal(format!(
                "`application` must name a Python file (.py) among the view type's `resources`, not `{application}`"
            )));
        }
        request.require_resource(application)?;
        Job::python(application).arguments(config.list("args")).with_config_options(&config)
    }
}

export_engine_transformation!(SparkPython);
