//! A view's transformation described for the executor: what the call
//! needs of the views (its parameters, inputs with data, configuration,
//! output limit, an incremental view's manifest check), read here, on the
//! scheduler's side, so that the executor (`task`) reads no view state.

use std::collections::HashMap;

use tokio::sync::mpsc;

use super::publish::Receipt;
use super::state::Scheduler;
use super::task::{self, CallContext, JobShape, Shape, Task, TaskReport};
use crate::catalog::Transformation;
use crate::engines::spark::Source;
use crate::lattice::ViewId;
use crate::model::ViewState;
use crate::runtime::{self, JobField, JobInput, TransformInput};

/// What a run gives of the attempt it starts.
pub(super) struct Attempt {
    /// What its output carries (see `publish`): the run and attempt its log names.
    pub receipt: Receipt,
    /// The run's actual time (its action's).
    pub actual: chrono::DateTime<chrono::Utc>,
    /// The view is rebuilt whole by a full refresh that selected it.
    pub full_refresh: bool,
}

/// A field list as the contract and the runner take it.
fn fields_of(view_type: &crate::catalog::ViewType) -> Vec<JobField> {
    view_type.fields.iter().map(|f| JobField { name: f.name.clone(), kind: f.kind.clone() }).collect()
}

impl Scheduler {
    /// Refuses, in one line, a run whose views (or what they depend on)
    /// run on Spark where Spark or Java is missing, rather than failing
    /// each of those views with the same reason.
    pub(super) fn check_engines(&self, addressed: &[ViewId]) -> Result<(), super::Error> {
        self.check_plugins()?;
        let mut needing: Vec<&str> = Vec::new();
        for id in self.views.lattice().closure(addressed) {
            let view_type = self.views.lattice().view_type(id);
            let engine = view_type.transformation.plugin().is_some_and(|name| self.executor.runs_on_engine(name));
            if engine && !needing.contains(&view_type.name.as_str()) {
                needing.push(&view_type.name);
            }
        }
        if needing.is_empty() {
            return Ok(());
        }
        match self.executor.locate_spark() {
            Ok(()) => Ok(()),
            Err(reason) => Err(super::Error::EngineUnavailable(format!(
                "{} run{} on Spark, which is not available here: {reason}",
                needing.join(", "),
                if needing.len() == 1 { "s" } else { "" }
            ))),
        }
    }

    /// Starts a view's transformation as a task reporting to `results`.
    pub(super) fn start_transformation(
        &mut self,
        id: ViewId,
        attempt: Attempt,
        results: mpsc::UnboundedSender<TaskReport>,
    ) -> Task {
        let view_type = self.views.lattice().view_type(id);
        let Transformation::Plugin { plugin: plugin_name, .. } = &view_type.transformation else {
            // External data: its done flag is its transformation.
            let data = self.executor.staging().exists(&self.views.lattice().done_flag_path(id));
            let done = TaskReport::Done { view: id, data, timestamp: self.clock.millis(), counters: None, txlog: None };
            return task::report_at_once(done, results);
        };
        let plugin = match self.executor.plugin(plugin_name) {
            Ok(plugin) => plugin,
            Err(message) => return task::failed_at_once(id, results, message),
        };
        let (call, shape) = self.call_context(id, plugin.world(), attempt);
        self.executor.start(call, shape, plugin, results, &self.clock)
    }

    /// What the call of `id`'s transformation needs, for a plugin of
    /// `world`: the common part, and what its world takes beside.
    fn call_context(&self, id: ViewId, world: runtime::World, attempt: Attempt) -> (CallContext, Shape) {
        let view_type = self.views.lattice().view_type(id);
        let data_path = self.views.lattice().data_path(id);
        let (shape, config) = match world {
            runtime::World::Engine => self.job_shape(id, &attempt, &data_path),
            _ => self.transform_shape(id, &attempt),
        };
        let call = CallContext {
            view: id,
            url: self.views.url(id).clone(),
            plugin: view_type.transformation.plugin().unwrap_or_default().to_string(),
            parameters: self.parameters(id),
            nominal_time: self.views.lattice().time(id).map(|t| t.timestamp_millis()),
            actual: attempt.actual,
            config,
            data_path,
            done_flag: view_type.done_flag.clone(),
            output_limit: self.output_limit(id),
            receipt: attempt.receipt,
        };
        (call, shape)
    }

    /// A plugin's transform: its inputs with data at guest paths, its
    /// configuration naming them, an incremental view's manifest check.
    fn transform_shape(&self, id: ViewId, attempt: &Attempt) -> (Shape, Result<Vec<(String, String)>, String>) {
        let own_timestamp = self.views.record(id).timestamp;
        let with_data =
            self.inputs_with_data(id, |dependency| self.views.record(dependency).state == ViewState::Materialized);
        let mut guest_paths: HashMap<ViewId, String> = HashMap::new();
        let mut inputs = Vec::with_capacity(with_data.len());
        for (dependency, input) in &with_data {
            let record = self.views.record(*dependency);
            guest_paths.insert(*dependency, runtime::guest_input(inputs.len()));
            inputs.push(TransformInput {
                name: input.source.clone(),
                view: input.input.clone(),
                dir: input.dir.clone(),
                timestamp: record.timestamp,
                changed: record.timestamp > own_timestamp,
            });
        }
        let path_of = |d: ViewId| guest_paths.get(&d).cloned().unwrap_or_default();
        // `${actualTime()}`: the run's actual time (its action's), not
        // when this transformation happens to start.
        let config = self.views.lattice().config(id, attempt.actual, runtime::GUEST_OUTPUT, &path_of);
        // Incremental only where the type says so and the plugin can.
        let incremental = (self.merges(id) == Some(true)).then(|| {
            self.txlog_spec(id, with_data.into_iter().map(|(_, input)| input).collect(), attempt.full_refresh)
        });
        (Shape::Transform { inputs, incremental }, config)
    }

    /// An engine's job: every declared name a table of the job, with the
    /// paths of its views that have data (none: an empty table of its
    /// fields); its configuration naming where the engine reads and writes.
    fn job_shape(
        &self,
        id: ViewId,
        attempt: &Attempt,
        data_path: &std::path::Path,
    ) -> (Shape, Result<Vec<(String, String)>, String>) {
        let view_type = self.views.lattice().view_type(id);
        let own_timestamp = self.views.record(id).timestamp;
        let with_data =
            self.inputs_with_data(id, |dependency| self.views.record(dependency).state == ViewState::Materialized);
        let mut sources: Vec<Source> = Vec::new();
        for declaration in &view_type.dependencies {
            if sources.iter().any(|s| s.name == declaration.name) {
                continue;
            }
            let target = &self.catalog.types()[declaration.target.0 as usize];
            sources.push(Source {
                name: declaration.name.clone(),
                format: target.format.clone(),
                fields: fields_of(target),
                paths: Vec::new(),
            });
        }
        let mut inputs = Vec::with_capacity(with_data.len());
        let mut paths: HashMap<ViewId, String> = HashMap::new();
        for (dependency, input) in &with_data {
            let record = self.views.record(*dependency);
            let target = self.views.lattice().view_type(*dependency);
            if let Some(source) = sources.iter_mut().find(|s| s.name == input.source) {
                source.paths.push(input.dir.clone());
            }
            paths.insert(*dependency, input.dir.display().to_string());
            inputs.push(JobInput {
                name: input.source.clone(),
                view: input.input.clone(),
                format: target.format.clone(),
                fields: fields_of(target),
                timestamp: record.timestamp,
                changed: record.timestamp > own_timestamp,
            });
        }
        // `dataIn()` and `dataOut()` are where the engine reads and where the
        // data will be: the job has no sandbox of guest paths.
        let path_of = |d: ViewId| paths.get(&d).cloned().unwrap_or_default();
        let config = self.views.lattice().config(id, attempt.actual, &data_path.display().to_string(), &path_of);
        let resources = match &view_type.transformation {
            Transformation::Plugin { resources, .. } => {
                resources.iter().map(|r| (r.name.clone(), r.content.to_vec())).collect()
            }
            Transformation::External => Vec::new(),
        };
        let shape =
            JobShape { inputs, sources, format: view_type.format.clone(), fields: fields_of(view_type), resources };
        (Shape::Job(shape), config)
    }
}
