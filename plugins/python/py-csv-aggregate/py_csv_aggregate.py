"""`py-csv-aggregate`: group-by with sum, count, min and max over the CSV
files of all inputs, written as one CSV file. The Python twin of the Rust
`csv-aggregate`: same configuration, counters, file name and output bytes.

Configuration:
- `group-by`: comma-separated columns to group by (none: one total row);
- `aggregates`: comma-separated `sum(col)`, `count(*)`, `count(col)`,
  `min(col)`, `max(col)`, each optionally named `name=sum(col)`;
- `file`: the output file name, default `part-00000.csv`.

Every input file must have a header row naming the columns used. Numbers
are exact decimals. Empty files count as no rows; group values are
trimmed. An empty cell is a missing value: `count(col)`, `sum`, `min` and
`max` skip it. A malformed row is a fatal error that names the file and line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal

from csv_rules import (
    CsvError, NumberError, Overflow, Record, add_decimals, decode_header, decode_row,
    parse_decimal, read_records, render_decimal, trim, write_record,
)
from trellis_plugin import Data, Fatal, InputFile, NoData, Request, optional, or_fatal, required, transformation

FUNCTIONS = ("sum", "count", "min", "max")


@dataclass(frozen=True)
class Aggregate:
    """One output column: `function` over `column` (None for `count(*)`)."""

    name: str
    function: str
    column: str | None

    @classmethod
    def parse(cls, text: str) -> Aggregate:
        """Parses `sum(amount)` or `total=sum(amount)`."""
        bad = Fatal(f"aggregate `{text}` is not of the form sum(col), count(*), count(col), min(col) or max(col)")
        alias, has_alias, call = text.partition("=")
        alias, call = (trim(alias), trim(call)) if has_alias else (None, text)
        function, has_paren, rest = call.partition("(")
        function = trim(function).translate(_ASCII_LOWER)
        if not has_paren or not rest.endswith(")") or function not in FUNCTIONS:
            raise bad
        column: str | None = trim(rest[:-1])
        if column == "*" and function == "count":
            column = None
        elif column in ("", "*"):
            raise bad
        default = "count" if column is None else f"{function}_{column}"
        return cls(default if alias is None else alias, function, column)

    def start(self) -> Decimal | int | None:
        """The accumulator before any row: 0 for count and sum, None for min and max."""
        return {"count": 0, "sum": Decimal(0)}.get(self.function)

    def render(self, value: Decimal | int | None) -> str:
        """The accumulator as its output cell."""
        if value is None:
            return ""
        return str(value) if self.function == "count" else render_decimal(value)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
Groups = dict[tuple[str, ...], list]


def aggregate_file(file: InputFile, group_by: list[str], aggregates: list[Aggregate], groups: Groups) -> int:
    """Folds one file into `groups`; returns its number of data rows."""
    with or_fatal(file):
        data = file.path.read_bytes()
    if not data:
        return 0  # an empty part file has no header and no rows
    records = read_records(data)
    try:
        header = decode_header(next(records, None) or _NO_HEADER)
    except CsvError as error:
        raise Fatal(f"{file} line 1: {error.message}") from None

    def column(name: str) -> int:
        for index, title in enumerate(header):
            if trim(title) == name:
                return index
        raise Fatal(f"{file}: no column `{name}` (columns: {', '.join(header)})")

    keys = [column(name) for name in group_by]
    values = [None if a.column is None else column(a.column) for a in aggregates]
    rows = 0
    for record in records:
        try:
            cells = decode_row(record, len(header))
        except CsvError as error:
            raise Fatal(f"{file} line {error.line}: malformed row: {error.message}") from None
        rows += 1
        key = tuple(trim(cells[i]) for i in keys)
        accumulators = groups.get(key)
        if accumulators is None:
            accumulators = groups[key] = [a.start() for a in aggregates]
        for slot, (aggregate, index) in enumerate(zip(aggregates, values)):
            if index is None:  # count(*)
                accumulators[slot] += 1
                continue
            cell = trim(cells[index])
            if not cell:
                continue
            if aggregate.function == "count":
                accumulators[slot] += 1
                continue
            try:
                value = parse_decimal(cell)
            except NumberError as problem:
                raise Fatal(f"{file} line {record.line}: column `{aggregate.column}`: `{cell}` {problem}") from None
            current = accumulators[slot]
            if aggregate.function == "sum":
                try:
                    accumulators[slot] = add_decimals(current, value)
                except Overflow:
                    raise Fatal(f"{file} line {record.line}: `{aggregate.name}` overflows") from None
            elif current is None or (value < current if aggregate.function == "min" else value > current):
                accumulators[slot] = value
    return rows


_NO_HEADER = Record(1, [])


@transformation(
    "py-csv-aggregate",
    "1.0.0",
    description="group-by with sum/count/min/max over the CSV files of all inputs",
    config=[
        optional("group-by", "comma-separated columns to group by"),
        required(
            "aggregates",
            "comma-separated sum(col), count(*), count(col), min(col), max(col); optionally name=...",
        ),
        optional("file", "output file name (default part-00000.csv)"),
    ],
)
def run(request: Request) -> Data | type[NoData]:
    """Aggregates every input file and writes the groups, sorted by key."""
    config = request.config
    group_by = config.list("group-by")
    aggregates = [Aggregate.parse(text) for text in config.list("aggregates")]
    if not aggregates:
        raise Fatal("`aggregates` names no aggregate")
    name = config.get("file", "part-00000.csv")
    groups: Groups = {}
    files = rows = 0
    for file in request.input_files():
        rows += aggregate_file(file, group_by, aggregates, groups)
        files += 1
    if rows == 0:
        return NoData
    lines = [write_record(group_by + [a.name for a in aggregates])]
    for key in sorted(groups):
        lines.append(write_record([*key, *(a.render(v) for a, v in zip(aggregates, groups[key]))]))
    with request.create_output_file(name) as out, or_fatal(name):
        out.write("".join(lines))
    return Data(files=files, rows_in=rows, rows_out=len(groups))
