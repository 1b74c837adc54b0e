//! `csv-aggregate`: group-by with sum, count, min and max over the CSV files
//! of all inputs, written as one CSV file.
//!
//! Configuration:
//! - `group-by`: comma-separated columns to group by (none: one total row);
//! - `aggregates`: comma-separated `sum(col)`, `count(*)`, `count(col)`,
//!   `min(col)`, `max(col)`, each optionally named `name=sum(col)`;
//! - `file`: the output file name, default `part-00000.csv`.
//!
//! Every input file must have a header row naming the columns used. Numbers
//! are exact decimals, so sums of money do not drift. Empty files count as
//! no rows; group values are trimmed. An empty cell is a
//! missing value: `count(col)`, `sum`, `min` and `max` skip it. A malformed
//! row is a fatal error that names the file and line.

use rust_decimal::Decimal;
use std::collections::BTreeMap;
use trellis_plugin_sdk::{
    ConfigKey, Failure, InputFile, Outcome, PluginInfo, Request, ResultExt, Transformation, export_transformation,
};

struct CsvAggregate;

impl Transformation for CsvAggregate {
    fn describe() -> PluginInfo {
        PluginInfo::new("csv-aggregate", env!("CARGO_PKG_VERSION"))
            .description("group-by with sum/count/min/max over the CSV files of all inputs")
            .config_key(ConfigKey::optional("group-by", "comma-separated columns to group by"))
            .config_key(ConfigKey::required(
                "aggregates",
                "comma-separated sum(col), count(*), count(col), min(col), max(col); optionally name=...",
            ))
            .config_key(ConfigKey::optional("file", "output file name (default part-00000.csv)"))
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        let config = request.config();
        let group_by: Vec<String> = config.list("group-by").into_iter().map(String::from).collect();
        let aggregates = config.list("aggregates").into_iter().map(Aggregate::parse).collect::<Result<Vec<_>, _>>()?;
        if aggregates.is_empty() {
            return Err(Failure::fatal("`aggregates` names no aggregate"));
        }

        let mut groups: BTreeMap<Vec<String>, Vec<Accumulator>> = BTreeMap::new();
        let mut rows = 0u64;
        let files = request.input_files()?;
        for file in &files {
            rows += aggregate_file(file, &group_by, &aggregates, &mut groups)?;
        }
        if rows == 0 {
            return Ok(Outcome::NoData);
        }

        let name = config.get("file").unwrap_or("part-00000.csv");
        let out = request.create_output_file(name)?;
        let mut writer = csv::Writer::from_writer(out);
        let header = group_by.iter().map(String::as_str).chain(aggregates.iter().map(|a| a.name.as_str()));
        writer.write_record(header).or_fatal(|| name)?;
        for (key, accumulators) in &groups {
            let values = accumulators.iter().map(Accumulator::render);
            let record: Vec<String> = key.iter().cloned().chain(values).collect();
            writer.write_record(&record).or_fatal(|| name)?;
        }
        writer.flush().or_fatal(|| name)?;

        Ok(Outcome::Data(vec![
            ("files".into(), files.len() as u64),
            ("rows-in".into(), rows),
            ("rows-out".into(), groups.len() as u64),
        ]))
    }
}

export_transformation!(CsvAggregate);

#[derive(Clone, Copy, PartialEq)]
enum Function {
    Sum,
    Count,
    Min,
    Max,
}

struct Aggregate {
    name: String,
    function: Function,
    /// None for `count(*)`.
    column: Option<String>,
}

impl Aggregate {
    /// Parses `sum(amount)` or `total=sum(amount)`.
    fn parse(text: &str) -> Result<Aggregate, Failure> {
        let bad = || {
            Failure::fatal(format!(
                "aggregate `{text}` is not of the form sum(col), count(*), count(col), min(col) or max(col)"
            ))
        };
        let (alias, call) = match text.split_once('=') {
            Some((alias, call)) => (Some(alias.trim()), call.trim()),
            None => (None, text),
        };
        let (function, rest) = call.split_once('(').ok_or_else(bad)?;
        let column = rest.strip_suffix(')').ok_or_else(bad)?.trim();
        let function = match function.trim().to_ascii_lowercase().as_str() {
            "sum" => Function::Sum,
            "count" => Function::Count,
            "min" => Function::Min,
            "max" => Function::Max,
            _ => return Err(bad()),
        };
        let column = match column {
            "*" if function == Function::Count => None,
            "" | "*" => return Err(bad()),
            column => Some(column.to_string()),
        };
        let default_name = match (&column, function) {
            (None, _) => "count".to_string(),
            (Some(column), function) => {
                let prefix = match function {
                    Function::Sum => "sum",
                    Function::Count => "count",
                    Function::Min => "min",
                    Function::Max => "max",
                };
                format!("{prefix}_{column}")
            }
        };
        Ok(Aggregate { name: alias.map(String::from).unwrap_or(default_name), function, column })
    }

    fn accumulator(&self) -> Accumulator {
        match self.function {
            Function::Count => Accumulator::Count(0),
            Function::Sum => Accumulator::Sum(Decimal::ZERO),
            Function::Min => Accumulator::Min(None),
            Function::Max => Accumulator::Max(None),
        }
    }
}

enum Accumulator {
    Count(u64),
    Sum(Decimal),
    Min(Option<Decimal>),
    Max(Option<Decimal>),
}

impl Accumulator {
    fn render(&self) -> String {
        match self {
            Accumulator::Count(n) => n.to_string(),
            Accumulator::Sum(sum) => sum.normalize().to_string(),
            Accumulator::Min(value) | Accumulator::Max(value) => {
                value.map(|v| v.normalize().to_string()).unwrap_or_default()
            }
        }
    }
}

/// Folds one file into `groups`; returns its number of data rows.
fn aggregate_file(
    file: &InputFile,
    group_by: &[String],
    aggregates: &[Aggregate],
    groups: &mut BTreeMap<Vec<String>, Vec<Accumulator>>,
) -> Result<u64, Failure> {
    if std::fs::metadata(&file.path).or_fatal(|| file)?.len() == 0 {
        return Ok(0); // an empty part file has no header and no rows
    }
    let mut reader = csv::Reader::from_path(&file.path).or_fatal(|| file)?;
    let headers = reader.headers().or_fatal(|| format!("{file} line 1"))?.clone();
    let column = |name: &str| {
        headers.iter().position(|h| h.trim() == name).ok_or_else(|| {
            let known: Vec<&str> = headers.iter().collect();
            Failure::fatal(format!("{file}: no column `{name}` (columns: {})", known.join(", ")))
        })
    };
    let key_columns = group_by.iter().map(|c| column(c)).collect::<Result<Vec<_>, _>>()?;
    let value_columns =
        aggregates.iter().map(|a| a.column.as_deref().map(column).transpose()).collect::<Result<Vec<_>, _>>()?;

    let mut rows = 0u64;
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map(|p| p.line()).unwrap_or(0);
            Failure::fatal(format!("{file} line {line}: malformed row: {}", e.kind_message()))
        })?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        rows += 1;
        let key: Vec<String> = key_columns.iter().map(|&i| record[i].trim().to_string()).collect();
        let accumulators = groups.entry(key).or_insert_with(|| aggregates.iter().map(Aggregate::accumulator).collect());
        for ((aggregate, accumulator), column) in aggregates.iter().zip(accumulators).zip(&value_columns) {
            let Some(column) = *column else {
                // count(*)
                if let Accumulator::Count(n) = accumulator {
                    *n += 1;
                }
                continue;
            };
            let cell = record[column].trim();
            if cell.is_empty() {
                continue;
            }
            if let Accumulator::Count(n) = accumulator {
                *n += 1;
                continue;
            }
            let column = aggregate.column.as_deref().unwrap_or_default();
            let value = parse_decimal(cell).map_err(|problem| {
                Failure::fatal(format!("{file} line {line}: column `{column}`: `{cell}` {problem}"))
            })?;
            match accumulator {
                Accumulator::Sum(sum) => {
                    *sum = sum
                        .checked_add(value)
                        .ok_or_else(|| Failure::fatal(format!("{file} line {line}: `{}` overflows", aggregate.name)))?;
                }
                Accumulator::Min(min) => *min = Some(min.map_or(value, |m| m.min(value))),
                Accumulator::Max(max) => *max = Some(max.map_or(value, |m| m.max(value))),
                Accumulator::Count(_) => unreachable!("handled above"),
            }
        }
    }
    Ok(rows)
}

/// Parses a plain decimal (`-12.50`, `7`, `+.5`) exactly. rust_decimal
/// alone would also take `1_000` and round digits past its 28th.
fn parse_decimal(text: &str) -> Result<Decimal, &'static str> {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let plain = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !plain(whole) || !plain(fraction) {
        return Err("is not a number");
    }
    Decimal::from_str_exact(text).map_err(|_| "has too many digits to add exactly")
}

/// The message of a CSV error without its position, which we print ourselves.
trait KindMessage {
    fn kind_message(&self) -> String;
}

impl KindMessage for csv::Error {
    fn kind_message(&self) -> String {
        match self.kind() {
            csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                format!("{len} fields where the header has {expected_len}")
            }
            csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".to_string(),
            _ => self.to_string(),
        }
    }
}
