//! `csv-aggregate`: group-by with sum, count, min and max over the CSV files
//! of all inputs, written as one CSV file. The configuration and the rules
//! are `csv-aggregation`'s; `csv-aggregate-incremental` is its incremental
//! twin.

use csv_aggregation::Aggregation;
use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct CsvAggregate;

impl Transformation for CsvAggregate {
    fn describe() -> PluginInfo {
        csv_aggregation::describe(
            "csv-aggregate",
            env!("CARGO_PKG_VERSION"),
            "group-by with sum/count/min/max over the CSV files of all inputs",
        )
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        Aggregation::full(&request)
    }
}

export_transformation!(CsvAggregate);
