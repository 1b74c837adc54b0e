//! The engine-transformation world's call (contract 1.2.0): the plugin is
//! given the view's request, with no directories at all, and describes the
//! job an engine driver runs. What it returns is checked against the
//! contract here, so that a driver only ever sees a well-formed job.

use std::time::Duration;

use wasmtime::Store;

use super::failure::{Phase, run};
use super::plugin::Pre;
use super::sandbox::Sandbox;
use super::{CallReport, Error, Failure, FailureKind, Plugin, World, bindings};

/// A field of a view type's schema, as declared.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobField {
    pub name: String,
    /// Its `type` in trellis.toml.
    #[serde(rename = "type")]
    pub kind: String,
}

/// One dependency with data, as the plugin sees it: named, never located.
#[derive(Debug, Clone)]
pub struct JobInput {
    pub name: String,
    pub view: String,
    pub format: String,
    pub fields: Vec<JobField>,
    pub timestamp: Option<i64>,
    pub changed: bool,
}

/// What the plugin is asked to describe a job for.
#[derive(Debug, Clone)]
pub struct JobRequest {
    pub view: String,
    pub parameters: Vec<(String, String)>,
    pub nominal_time: Option<i64>,
    pub actual_time: i64,
    pub config: Vec<(String, String)>,
    pub inputs: Vec<JobInput>,
    /// The view type's own storage format and fields.
    pub format: String,
    pub fields: Vec<JobField>,
    /// The view type's resources, by name, with their contents as loaded.
    pub resources: Vec<(String, Vec<u8>)>,
}

/// What the engine runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Application {
    /// A SQL query over the inputs, each a temporary view named after it.
    Sql(String),
    /// A Python application: the name of one of the view type's resources.
    Python(String),
}

/// A job, as the plugin described it and the contract allows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EngineJob {
    pub engine: String,
    pub application: Application,
    pub arguments: Vec<String>,
    pub conf: Vec<(String, String)>,
    /// 0: as the engine partitions it.
    pub output_files: u32,
}

/// How long describing a job may take, whatever the job's own deadline:
/// the call reads nothing and computes little.
const JOB_CALL_DEADLINE: Duration = Duration::from_secs(30);

/// The most a job description may weigh, all its strings together: a query
/// or a handful of arguments, not data.
const MAX_JOB_BYTES: usize = 1 << 20;

/// The most output files a job may ask for: beyond it a view is a directory
/// of many tiny files, which is never what a view type means.
const MAX_OUTPUT_FILES: u32 = 10_000;

impl Plugin {
    /// Asks an engine-transformation plugin for the job that materializes
    /// `request.view`. The call has no grants, a fixed clock and fixed
    /// random numbers, and at most [`JOB_CALL_DEADLINE`] (or the plugin's
    /// deadline, if shorter).
    pub async fn job(&self, request: &JobRequest) -> Result<CallReport<EngineJob>, Error> {
        use bindings::engine::exports::trellis::plugin::engine_job as wit;
        let Pre::Engine(pre) = &self.inner.pre else {
            return Err(self.wrong_world(World::Engine));
        };
        let fields = |fields: &[JobField]| -> Vec<wit::Field> {
            fields.iter().map(|f| wit::Field { name: f.name.clone(), kind: f.kind.clone() }).collect()
        };
        let wit_request = wit::Request {
            view: request.view.clone(),
            parameters: request.parameters.clone(),
            nominal_time: request.nominal_time,
            actual_time: request.actual_time,
            config: request.config.clone(),
            inputs: request
                .inputs
                .iter()
                .map(|input| wit::Input {
                    name: input.name.clone(),
                    view: input.view.clone(),
                    format: input.format.clone(),
                    fields: fields(&input.fields),
                    timestamp: input.timestamp,
                    changed: input.changed,
                })
                .collect(),
            format: request.format.clone(),
            fields: fields(&request.fields),
            resources: request
                .resources
                .iter()
                .map(|(name, content)| wit::NamedResource { name: name.clone(), content: content.clone() })
                .collect(),
        };
        let mut limits = self.limits;
        limits.deadline = limits.deadline.min(JOB_CALL_DEADLINE);
        let plugin = self.with_limits(limits);
        let mut store = plugin.store(&[], true).await?;
        let call = async |store: &mut Store<Sandbox>| {
            let instance = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
            instance.trellis_plugin_engine_job().call_job(&mut *store, &wit_request).await.map_err(Phase::Call)
        };
        let report = run(&mut store, limits, call, |returned| match returned {
            Ok(job) => {
                let application = match job.application {
                    wit::Application::Sql(query) => Application::Sql(query),
                    wit::Application::Python(name) => Application::Python(name),
                };
                let job = EngineJob {
                    engine: job.engine,
                    application,
                    arguments: job.arguments,
                    conf: job.conf,
                    output_files: job.output_files,
                };
                check_job(&job, request)?;
                Ok(job)
            }
            Err(wit::Failure::Retryable(message)) => Err(Failure::new(FailureKind::Retryable, message)),
            Err(wit::Failure::Fatal(message)) => Err(Failure::new(FailureKind::Fatal, message)),
        });
        Ok(report.await)
    }
}

/// What the contract allows a job to be: an engine named, a non-empty
/// query or an application that is one of the type's resources, properties
/// named once each, within a size a description has.
fn check_job(job: &EngineJob, request: &JobRequest) -> Result<(), Failure> {
    let malformed = |message: String| Err(Failure::new(FailureKind::MalformedResult, message));
    if job.engine.is_empty() {
        return malformed("its job names no engine".into());
    }
    match &job.application {
        Application::Sql(query) if query.trim().is_empty() => return malformed("its job's query is empty".into()),
        Application::Python(name) if !request.resources.iter().any(|(resource, _)| resource == name) => {
            let listed: Vec<&str> = request.resources.iter().map(|(name, _)| name.as_str()).collect();
            let there = if listed.is_empty() {
                "the view type lists no `resources`".to_string()
            } else {
                format!("it lists {}", listed.join(", "))
            };
            return malformed(format!(
                "its job's application `{name}` is not one of the view type's resources ({there}); \
                 list it in `resources`, so that editing it rebuilds the views"
            ));
        }
        _ => {}
    }
    let mut seen = std::collections::HashSet::new();
    for (key, _) in &job.conf {
        // A name with `=` or a space would pass for another property on
        // spark-submit's command line (`--conf spark.local.dir=x=y`).
        if key.is_empty() || key.chars().any(|c| c == '=' || c.is_whitespace() || c.is_control()) {
            return malformed(format!("its job sets a property named {key:?}, which is not a property's name"));
        }
        if !seen.insert(key) {
            return malformed(format!("its job sets `{key}` twice"));
        }
    }
    if job.output_files > MAX_OUTPUT_FILES {
        return malformed(format!("its job asks for {} output files, more than {MAX_OUTPUT_FILES}", job.output_files));
    }
    let text = |s: &String| s.len();
    let size = job.engine.len()
        + match &job.application {
            Application::Sql(text) | Application::Python(text) => text.len(),
        }
        + job.arguments.iter().map(text).sum::<usize>()
        + job.conf.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    if size > MAX_JOB_BYTES {
        return malformed(format!("its job description is {size} bytes, more than {MAX_JOB_BYTES}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(resources: &[&str]) -> JobRequest {
        JobRequest {
            view: "p.q/V".into(),
            parameters: Vec::new(),
            nominal_time: None,
            actual_time: 0,
            config: Vec::new(),
            inputs: Vec::new(),
            format: "csv".into(),
            fields: Vec::new(),
            resources: resources.iter().map(|name| (name.to_string(), Vec::new())).collect(),
        }
    }

    fn job(application: Application) -> EngineJob {
        EngineJob { engine: "spark".into(), application, arguments: Vec::new(), conf: Vec::new(), output_files: 1 }
    }

    #[test]
    fn a_job_is_checked_against_the_contract() {
        let check = |job: &EngineJob, resources: &[&str]| match check_job(job, &request(resources)) {
            Ok(()) => "ok".to_string(),
            Err(failure) => format!("{:?}: {}", failure.kind, failure.message),
        };
        let sql = job(Application::Sql("SELECT 1".into()));
        let mut disguised = sql.clone();
        disguised.conf = vec![("spark.local.dir=/elsewhere".into(), "x".into())];
        let mut twice = sql.clone();
        twice.conf = vec![("spark.a".into(), "1".into()), ("spark.a".into(), "2".into())];
        let mut nameless = sql.clone();
        nameless.engine.clear();
        let mut many = sql.clone();
        many.output_files = 10_001;
        let lines = [
            check(&sql, &[]),
            check(&job(Application::Sql("  \n".into())), &[]),
            check(&job(Application::Python("jobs/top.py".into())), &["jobs/top.py"]),
            check(&job(Application::Python("jobs/top.py".into())), &[]),
            check(&job(Application::Python("jobs/top.py".into())), &["jobs/other.py", "sql/a.sql"]),
            check(&twice, &[]),
            check(&disguised, &[]),
            check(&nameless, &[]),
            check(&many, &[]),
            check(&job(Application::Sql("x".repeat(MAX_JOB_BYTES + 1))), &[]),
        ];
        expect_test::expect![[r#"
            ok
            MalformedResult: its job's query is empty
            ok
            MalformedResult: its job's application `jobs/top.py` is not one of the view type's resources (the view type lists no `resources`); list it in `resources`, so that editing it rebuilds the views
            MalformedResult: its job's application `jobs/top.py` is not one of the view type's resources (it lists jobs/other.py, sql/a.sql); list it in `resources`, so that editing it rebuilds the views
            MalformedResult: its job sets `spark.a` twice
            MalformedResult: its job sets a property named "spark.local.dir=/elsewhere", which is not a property's name
            MalformedResult: its job names no engine
            MalformedResult: its job asks for 10001 output files, more than 10000
            MalformedResult: its job description is 1048582 bytes, more than 1048576
        "#]]
        .assert_eq(&(lines.join("\n") + "\n"));
    }
}
