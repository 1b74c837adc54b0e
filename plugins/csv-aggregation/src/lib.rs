//! The aggregation of `csv-aggregate` and `csv-aggregate-incremental`:
//! group-by with sum, count, min and max over CSV files, written as one CSV
//! file, and read back from one so that new rows can be merged into it.
//!
//! Configuration:
//! - `group-by`: comma-separated columns to group by (none: one total row);
//! - `aggregates`: comma-separated `sum(col)`, `count(*)`, `count(col)`,
//!   `min(col)`, `max(col)`, each optionally named `name=sum(col)`;
//! - `file`: the output file name, default `part-00000.csv`.
//!
//! Every input file must have a header row naming the columns used. Numbers
//! are exact decimals, so sums of money do not drift, and a merge of partial
//! results equals the aggregate of all rows to the byte. Empty files count
//! as no rows; group values are trimmed. An empty cell is a missing value:
//! `count(col)`, `sum`, `min` and `max` skip it. A malformed row is a fatal
//! error that names the file and line.

use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::path::Path;
use trellis_plugin_sdk::{ConfigKey, Failure, InputFile, Outcome, PluginInfo, Request, ResultExt};

/// Accumulators per group key.
pub type Groups = BTreeMap<Vec<String>, Vec<Accumulator>>;

/// The configuration keys both plugins read.
pub fn describe(name: &str, version: &str, description: &str) -> PluginInfo {
    PluginInfo::new(name, version)
        .description(description)
        .config_key(ConfigKey::optional("group-by", "comma-separated columns to group by"))
        .config_key(ConfigKey::required(
            "aggregates",
            "comma-separated sum(col), count(*), count(col), min(col), max(col); optionally name=...",
        ))
        .config_key(ConfigKey::optional("file", "output file name (default part-00000.csv)"))
}

/// One call's aggregation: what to group by and compute, and the groups so far.
pub struct Aggregation {
    group_by: Vec<String>,
    aggregates: Vec<Aggregate>,
    file: String,
    pub groups: Groups,
    /// Data rows folded in (from input files, not from a previous output).
    pub rows: u64,
    pub files: u64,
}

impl Aggregation {
    pub fn new(request: &Request) -> Result<Aggregation, Failure> {
        let config = request.config();
        let group_by: Vec<String> = config.list("group-by").into_iter().map(String::from).collect();
        let aggregates = config.list("aggregates").into_iter().map(Aggregate::parse).collect::<Result<Vec<_>, _>>()?;
        if aggregates.is_empty() {
            return Err(Failure::fatal("`aggregates` names no aggregate"));
        }
        let file = config.get("file").unwrap_or("part-00000.csv").to_string();
        Ok(Aggregation { group_by, aggregates, file, groups: Groups::new(), rows: 0, files: 0 })
    }

    /// Folds the rows of `files` in.
    pub fn add_files(&mut self, files: &[InputFile]) -> Result<(), Failure> {
        for file in files {
            self.rows += aggregate_file(file, &self.group_by, &self.aggregates, &mut self.groups)?;
            self.files += 1;
        }
        Ok(())
    }

    /// Folds in the output this configuration wrote before, found in
    /// `dir`: its groups merge with the new rows' as if those rows had been
    /// read again. Returns whether there was one.
    pub fn add_previous(&mut self, dir: &Path) -> Result<bool, Failure> {
        let path = dir.join(&self.file);
        if !path.is_file() {
            return Ok(false);
        }
        let shown = format!("previous output {}", self.file);
        let mut reader = csv::Reader::from_path(&path).or_fatal(|| &shown)?;
        let headers = reader.headers().or_fatal(|| &shown)?.clone();
        let expected: Vec<&str> =
            self.group_by.iter().map(String::as_str).chain(self.aggregates.iter().map(|a| a.name.as_str())).collect();
        if headers.iter().collect::<Vec<_>>() != expected {
            return Err(Failure::fatal(format!("{shown} has columns other than {}", expected.join(", "))));
        }
        for record in reader.records() {
            let record = record.or_fatal(|| &shown)?;
            let (key, values) = (&record.iter().collect::<Vec<_>>()[..self.group_by.len()], self.group_by.len());
            let key: Vec<String> = key.iter().map(|k| k.to_string()).collect();
            let mut merged = Vec::with_capacity(self.aggregates.len());
            for (aggregate, cell) in self.aggregates.iter().zip(record.iter().skip(values)) {
                merged.push(aggregate.read(cell).ok_or_else(|| {
                    Failure::fatal(format!("{shown}: `{cell}` is not a value of `{}`", aggregate.name))
                })?);
            }
            match self.groups.get_mut(&key) {
                Some(accumulators) => {
                    for (accumulator, previous) in accumulators.iter_mut().zip(merged) {
                        accumulator
                            .merge(previous)
                            .ok_or_else(|| Failure::fatal(format!("{shown}: a sum overflows")))?;
                    }
                }
                None => {
                    self.groups.insert(key, merged);
                }
            }
        }
        Ok(true)
    }

    /// Writes the groups as one CSV file; no groups is no data.
    pub fn write(&self, request: &Request) -> Result<Outcome, Failure> {
        if self.groups.is_empty() {
            return Ok(Outcome::NoData);
        }
        let name = self.file.as_str();
        let out = request.create_output_file(name)?;
        let mut writer = csv::Writer::from_writer(out);
        let header = self.group_by.iter().map(String::as_str).chain(self.aggregates.iter().map(|a| a.name.as_str()));
        writer.write_record(header).or_fatal(|| name)?;
        for (key, accumulators) in &self.groups {
            let values = accumulators.iter().map(Accumulator::render);
            let record: Vec<String> = key.iter().cloned().chain(values).collect();
            writer.write_record(&record).or_fatal(|| name)?;
        }
        writer.flush().or_fatal(|| name)?;
        Ok(Outcome::Data(vec![
            ("files".into(), self.files),
            ("rows-in".into(), self.rows),
            ("rows-out".into(), self.groups.len() as u64),
        ]))
    }

    /// The whole computation from every input file.
    pub fn full(request: &Request) -> Result<Outcome, Failure> {
        let mut aggregation = Aggregation::new(request)?;
        aggregation.add_files(&request.input_files()?)?;
        if aggregation.rows == 0 {
            return Ok(Outcome::NoData);
        }
        aggregation.write(request)
    }
}

#[derive(Clone, Copy, PartialEq)]
pub enum Function {
    Sum,
    Count,
    Min,
    Max,
}

pub struct Aggregate {
    pub name: String,
    pub function: Function,
    /// None for `count(*)`.
    pub column: Option<String>,
}

impl Aggregate {
    /// Parses `sum(amount)` or `total=sum(amount)`.
    pub fn parse(text: &str) -> Result<Aggregate, Failure> {
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

    /// A rendered partial result, read back; `None` if it is not one.
    fn read(&self, cell: &str) -> Option<Accumulator> {
        let decimal = |cell: &str| if cell.is_empty() { Some(None) } else { parse_decimal(cell).ok().map(Some) };
        Some(match self.function {
            Function::Count => Accumulator::Count(cell.parse().ok()?),
            Function::Sum => Accumulator::Sum(parse_decimal(cell).ok()?),
            Function::Min => Accumulator::Min(decimal(cell)?),
            Function::Max => Accumulator::Max(decimal(cell)?),
        })
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

pub enum Accumulator {
    Count(u64),
    Sum(Decimal),
    Min(Option<Decimal>),
    Max(Option<Decimal>),
}

impl Accumulator {
    /// Adds another partial result of the same aggregate; `None` on overflow.
    fn merge(&mut self, other: Accumulator) -> Option<()> {
        match (self, other) {
            (Accumulator::Count(n), Accumulator::Count(m)) => *n = n.checked_add(m)?,
            (Accumulator::Sum(a), Accumulator::Sum(b)) => *a = a.checked_add(b)?,
            (Accumulator::Min(a), Accumulator::Min(b)) => *a = [*a, b].into_iter().flatten().min(),
            (Accumulator::Max(a), Accumulator::Max(b)) => *a = [*a, b].into_iter().flatten().max(),
            _ => unreachable!("partial results of one aggregate have one kind"),
        }
        Some(())
    }

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
    groups: &mut Groups,
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
