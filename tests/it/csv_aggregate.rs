//! `csv-aggregate` through `trellis plugins run`, checked against sums and
//! counts computed independently here.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::support::{Lcg, plugin_path, run, trellis};

/// Exact cents of a decimal string such as `-12.5` or `7`.
fn cents(text: &str) -> i64 {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    assert!(fraction.len() <= 2, "{text} has more than two decimals");
    let value = whole.parse::<i64>().unwrap() * 100 + format!("{fraction:0<2}").parse::<i64>().unwrap();
    if negative { -value } else { value }
}

fn decimal(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
}

#[derive(Debug, Default, PartialEq)]
struct Expected {
    rows: u64,
    amounts: u64,
    sum: i64,
    min: Option<i64>,
    max: Option<i64>,
}

#[test]
fn sums_and_counts_match_an_independent_computation() {
    let dir = tempfile::tempdir().unwrap();
    let mut random = Lcg::new(42);
    let mut expected: BTreeMap<(String, String), Expected> = BTreeMap::new();
    let mut inputs = Vec::new();
    for input in ["north", "south"] {
        let input_dir = dir.path().join(input);
        std::fs::create_dir_all(input_dir.join("2015/05")).unwrap();
        std::fs::write(input_dir.join("_SUCCESS"), "").unwrap();
        for file in 0..4 {
            let mut csv = String::from("shop,day,amount,note\n");
            for _ in 0..random.below(200) + 50 {
                let shop = format!("SHOP{}", random.below(5));
                let day = format!("2015-05-0{}", random.below(3) + 1);
                let entry = expected.entry((shop.clone(), day.clone())).or_default();
                entry.rows += 1;
                // One value in ten is missing; some are negative (refunds).
                let amount = if random.below(10) == 0 {
                    String::new()
                } else {
                    let value = random.below(200_000) as i64 - 20_000;
                    entry.amounts += 1;
                    entry.sum += value;
                    entry.min = Some(entry.min.map_or(value, |m| m.min(value)));
                    entry.max = Some(entry.max.map_or(value, |m| m.max(value)));
                    decimal(value)
                };
                writeln!(csv, "{shop},{day},{amount},\"a, quoted note\"").unwrap();
            }
            // Files in a subdirectory count too.
            let name = if file % 2 == 0 { format!("part-{file}.csv") } else { format!("2015/05/part-{file}.csv") };
            std::fs::write(input_dir.join(name), csv).unwrap();
        }
        inputs.push(format!("{input}={}", input_dir.display()));
    }

    let output = dir.path().join("out");
    let mut command = trellis();
    command.args(["plugins", "run"]).arg(plugin_path("csv_aggregate"));
    for input in &inputs {
        command.args(["--input", input]);
    }
    command.args(["--output"]).arg(&output).args([
        "--config",
        "group-by=shop,day",
        "--config",
        "aggregates=count(*), count(amount), total=sum(amount), min(amount), max(amount)",
        "--config",
        "file=sales.csv",
    ]);
    let result = run(&mut command);
    assert_eq!(result.code, 0, "{}", result.stderr);
    let total_rows: u64 = expected.values().map(|e| e.rows).sum();
    assert!(result.stdout.starts_with("data: files=8 "), "{}", result.stdout);
    assert!(result.stdout.contains(&format!("rows-in={total_rows} ")), "{}", result.stdout);

    let written = std::fs::read_to_string(output.join("sales.csv")).unwrap();
    let mut lines = written.lines();
    assert_eq!(lines.next(), Some("shop,day,count,count_amount,total,min_amount,max_amount"));
    let mut actual = BTreeMap::new();
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let optional = |text: &str| (!text.is_empty()).then(|| cents(text));
        actual.insert(
            (fields[0].to_string(), fields[1].to_string()),
            Expected {
                rows: fields[2].parse().unwrap(),
                amounts: fields[3].parse().unwrap(),
                sum: cents(fields[4]),
                min: optional(fields[5]),
                max: optional(fields[6]),
            },
        );
    }
    assert_eq!(actual, expected);
}

fn run_on(dir: &Path, files: &[(&str, &str)], aggregates: &str) -> crate::support::Run {
    let input = dir.join("orders");
    std::fs::create_dir_all(&input).unwrap();
    for (name, content) in files {
        std::fs::write(input.join(name), content).unwrap();
    }
    run(trellis()
        .args(["plugins", "run"])
        .arg(plugin_path("csv_aggregate"))
        .arg("--input")
        .arg(format!("orders={}", input.display()))
        .arg("--output")
        .arg(dir.join("out"))
        .args(["--config", "group-by=shop", "--config"])
        .arg(format!("aggregates={aggregates}")))
}

#[test]
fn a_malformed_number_is_fatal_and_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let result = run_on(dir.path(), &[("a.csv", "shop,amount\nS1,1.5\nS1,abc\n")], "sum(amount)");
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert!(
        result.stderr.contains("run failed (fatal): orders:a.csv line 3: column `amount`: `abc` is not a number"),
        "{}",
        result.stderr
    );
    assert!(!dir.path().join("out/part-00000.csv").exists(), "a failed run wrote its output");
}

#[test]
fn a_row_with_missing_fields_is_fatal_and_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let files = [("a.csv", "shop,amount\nS1,1\n"), ("b.csv", "shop,amount\nS1,1\nS2,2\nS3\n")];
    let result = run_on(dir.path(), &files, "count(*)");
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert!(
        result.stderr.contains("orders:b.csv line 4: malformed row: 1 fields where the header has 2"),
        "{}",
        result.stderr
    );
}

#[test]
fn a_missing_column_is_fatal_and_lists_the_columns() {
    let dir = tempfile::tempdir().unwrap();
    let result = run_on(dir.path(), &[("a.csv", "shop,price\nS1,1\n")], "sum(amount)");
    assert_eq!(result.code, 1);
    assert!(result.stderr.contains("orders:a.csv: no column `amount` (columns: shop, price)"), "{}", result.stderr);
}

#[test]
fn headers_only_is_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let result = run_on(dir.path(), &[("a.csv", "shop,amount\n")], "sum(amount)");
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert!(result.stdout.starts_with("no-data"), "{}", result.stdout);
}

#[test]
fn a_bad_aggregate_is_fatal_and_says_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let result = run_on(dir.path(), &[("a.csv", "shop,amount\nS1,1\n")], "median(amount)");
    assert_eq!(result.code, 1);
    assert!(
        result.stderr.contains("aggregate `median(amount)` is not of the form sum(col), count(*)"),
        "{}",
        result.stderr
    );
}

#[test]
fn numbers_are_plain_exact_decimals() {
    for (cell, problem) in [
        ("1_000", "`1_000` is not a number"),
        ("1e3", "`1e3` is not a number"),
        ("1234567890123456789012345678901234567890", "has too many digits to add exactly"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let csv = format!("shop,amount\nS1,{cell}\n");
        let result = run_on(dir.path(), &[("a.csv", &csv)], "sum(amount)");
        assert_eq!(result.code, 1, "{cell}: {}", result.stderr);
        assert!(result.stderr.contains("orders:a.csv line 2: column `amount`: "), "{}", result.stderr);
        assert!(result.stderr.contains(problem), "{cell}: {}", result.stderr);
    }
}

#[test]
fn empty_files_are_no_rows_and_group_values_are_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let files = [("a.csv", ""), ("b.csv", "shop,amount\nS1 ,1.5\n S1,2.5\n")];
    let result = run_on(dir.path(), &files, "sum(amount)");
    assert_eq!(result.code, 0, "{}", result.stderr);
    let written = std::fs::read_to_string(dir.path().join("out/part-00000.csv")).unwrap();
    assert_eq!(written, "shop,sum_amount\nS1,4\n");
}

/// A year of daily inputs is 365 grants, each a preopened directory: more
/// than the handles a guest may open itself, which they do not count against.
#[tokio::test(flavor = "multi_thread")]
async fn a_view_reads_a_year_of_daily_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let mut inputs = Vec::new();
    for day in 0..366 {
        let input = dir.path().join(format!("day-{day:03}"));
        std::fs::create_dir_all(&input).unwrap();
        std::fs::write(input.join("orders.csv"), "amount\n1.50\n").unwrap();
        inputs.push(input);
    }
    let named: Vec<(&str, &Path)> = inputs.iter().map(|input| ("orders", input.as_path())).collect();
    let output = dir.path().join("out");
    std::fs::create_dir_all(&output).unwrap();
    let plugin = crate::support::load("csv_aggregate").await;
    let request = crate::support::request(&named, &output, &[("aggregates", "n=count(*),total=sum(amount)")]);
    let report = plugin.transform(&request).await.unwrap();
    assert!(report.result.is_ok(), "{:?}", report.result);
    assert_eq!(std::fs::read_to_string(output.join("part-00000.csv")).unwrap(), "n,total\n366,549\n");
}
