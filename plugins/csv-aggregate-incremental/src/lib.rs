//! `csv-aggregate-incremental`: `csv-aggregate` that merges what is new into
//! its previous output. Sums, counts, minima and maxima of the new files are
//! folded into the groups read back from the last output, so a year-to-date
//! view reads one day when one day arrives; the result is byte for byte
//! what `csv-aggregate` writes from all the files. When a file changed or
//! went away since the last commit, or there is no previous output, it
//! reads everything.

use csv_aggregation::Aggregation;
use trellis_plugin_sdk::{
    Failure, IncrementalOutcome, IncrementalRequest, IncrementalTransformation, Outcome, PluginInfo, Request,
    Transformation, export_incremental_transformation,
};

struct CsvAggregateIncremental;

impl Transformation for CsvAggregateIncremental {
    fn describe() -> PluginInfo {
        csv_aggregation::describe(
            "csv-aggregate-incremental",
            env!("CARGO_PKG_VERSION"),
            "csv-aggregate, merging the new input files into the previous output",
        )
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        Aggregation::full(&request)
    }
}

impl IncrementalTransformation for CsvAggregateIncremental {
    fn run_incremental(incremental: IncrementalRequest) -> Result<IncrementalOutcome, Failure> {
        let request = &incremental.request;
        // An input read whole would be added again on every merge.
        let all_incremental = incremental.deltas.iter().all(|delta| delta.incremental);
        let previous = match incremental.previous_output() {
            Some(previous) if incremental.can_merge() && all_incremental => previous,
            _ => {
                let why = match &incremental.full_reason {
                    Some(reason) => reason.as_str(),
                    None if !all_incremental => "an input is read whole",
                    None => "a file changed or went away since the last commit",
                };
                trellis_plugin_sdk::info!("read every input file: {why}");
                return Aggregation::full(request).map(IncrementalOutcome::from);
            }
        };
        let mut aggregation = Aggregation::new(request)?;
        aggregation.add_files(&incremental.new_input_files()?)?;
        trellis_plugin_sdk::info!("merging {} new file(s) into the previous output", aggregation.files);
        if !aggregation.add_previous(previous)? {
            // The previous output is not this configuration's: start over.
            return Aggregation::full(request).map(IncrementalOutcome::from);
        }
        aggregation.write(request).map(IncrementalOutcome::from)
    }
}

export_incremental_transformation!(CsvAggregateIncremental);
