"""The formats `csv-aggregate` (Rust) reads and writes, in pure functions, so
that `py-csv-aggregate` gives the same bytes and the same failures:

- CSV as the Rust `csv` crate reads it by default: `,` and `"`, quotes
  doubled inside quoted fields, CR, LF or CRLF ending a record, blank lines
  skipped, a leading byte order mark dropped, every record as long as the
  header; and writes it: a field is quoted only if it holds `,`, `"`, CR
  or LF, lines end with LF;
- decimals as `rust_decimal` holds them: at most 28 digits after the point
  and a coefficient below 2**96, sums exact (or rounded half-even in the
  last place, as rust_decimal does, when they would not fit), printed
  without trailing zeros or exponent;
- trimming as Rust's `str::trim` does it (Unicode White_Space).
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "CsvError", "Record", "read_records", "write_record", "trim",
    "parse_decimal", "add_decimals", "render_decimal", "NumberError", "Overflow",
    "decode_header", "decode_row",
]

# -- CSV ---------------------------------------------------------------------

_BLANK = re.compile(rb"[\r\n]*")
# A quoted field: its content (quotes doubled), the closing quote (absent
# only at the end of the data), then anything up to the next delimiter taken
# literally; or an unquoted field, in which quotes are literal.
_FIELD = re.compile(rb'"((?:[^"]+|"")*)"?([^,\r\n]*)|([^,\r\n]*)')


@dataclass(frozen=True)
class Record:
    """One CSV record: its fields, and the line the `csv` crate reports for
    it (1 + the line feeds consumed before it was read, so blank lines
    before a record and the LF of a CRLF count toward the line above)."""

    line: int
    fields: list[bytes]


class CsvError(Exception):
    """A record the `csv` crate would refuse."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def read_records(data: bytes) -> Iterator[Record]:
    """Every record of `data`, header included, unvalidated. A UTF-8 byte
    order mark at the very start is skipped."""
    pos, end, line = (3 if data.startswith(b"\xef\xbb\xbf") else 0), len(data), 1
    while True:
        record_line = line
        start = pos
        pos = _BLANK.match(data, pos).end()
        if pos >= end:
            return
        fields: list[bytes] = []
        while True:
            match = _FIELD.match(data, pos)
            quoted, tail, plain = match.groups()
            fields.append(plain if plain is not None else quoted.replace(b'""', b'"') + tail)
            pos = match.end()
            if pos < end and data[pos] == 0x2C:  # ,
                pos += 1
                continue
            pos += pos < end  # the one CR or LF that ends the record
            break
        line += data.count(b"\n", start, pos)
        yield Record(record_line, fields)


def decode_header(record: Record) -> list[str]:
    """The header's names, or the error the `csv` crate reports for it."""
    names = []
    for index, field in enumerate(record.fields):
        try:
            names.append(field.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise CsvError(1, (
                f"CSV parse error: record 0 (line {record.line}, field: {index}, byte: 0): "
                f"invalid utf-8: invalid UTF-8 in field {index} near byte index {error.start}"
            )) from None
    return names


def decode_row(record: Record, expected: int) -> list[str]:
    """A data record's fields, or `CsvError` if its length differs from the
    header's or it is not UTF-8."""
    if len(record.fields) != expected:
        raise CsvError(record.line, f"{len(record.fields)} fields where the header has {expected}")
    try:
        return [field.decode("utf-8") for field in record.fields]
    except UnicodeDecodeError:
        raise CsvError(record.line, "not valid UTF-8") from None


_SPECIAL = re.compile(r'[,"\r\n]')


def write_record(fields: Sequence[str]) -> str:
    """One CSV line, LF-terminated, quoting only where needed; a record
    that would be empty is written as `""`."""
    if not any(fields) and len(fields) <= 1:
        return '""\n'
    return ",".join(f'"{f.replace(chr(34), chr(34) * 2)}"' if _SPECIAL.search(f) else f for f in fields) + "\n"


_RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def trim(text: str) -> str:
    """`text` without leading and trailing whitespace, as Rust's `str::trim`."""
    return text.strip(_RUST_WHITESPACE)


# -- Decimals ----------------------------------------------------------------

_MAX_COEFFICIENT = (1 << 96) - 1
_MAX_SCALE = 28
_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_EVEN, Emax=999999, Emin=-999999)
_PLAIN = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)\Z")


class NumberError(ValueError):
    """A cell that is not a decimal rust_decimal holds exactly; the message
    completes "`cell` ..."."""


class Overflow(ArithmeticError):
    """A sum beyond rust_decimal's range."""


def _fits(value: decimal.Decimal) -> bool:
    sign, digits, exponent = value.as_tuple()
    coefficient = int("".join(map(str, digits))) if digits else 0
    return coefficient <= _MAX_COEFFICIENT and -exponent <= _MAX_SCALE


def parse_decimal(text: str) -> decimal.Decimal:
    """A plain decimal (`-12.50`, `7`, `+.5`), exactly, or `NumberError`."""
    if not text.isascii() or not _PLAIN.match(text):
        raise NumberError("is not a number")
    value = decimal.Decimal(text)
    if value.as_tuple().exponent > 0 or not _fits(value):
        raise NumberError("has too many digits to add exactly")
    return value


def add_decimals(a: decimal.Decimal, b: decimal.Decimal) -> decimal.Decimal:
    """`a + b` as rust_decimal's checked_add: exact if it fits, else rounded
    half-even one place at a time, `Overflow` if no places are left."""
    total = _EXACT.add(a, b)
    while not _fits(total):
        scale = -total.as_tuple().exponent
        if scale <= 0:
            raise Overflow()
        total = total.quantize(decimal.Decimal(1).scaleb(1 - scale), context=_EXACT)
    return total


def render_decimal(value: decimal.Decimal) -> str:
    """`value` without trailing zeros or exponent, `-0` as `0`."""
    if value.is_zero():
        return "0"
    text = format(value.normalize(_EXACT), "f")
    return text
