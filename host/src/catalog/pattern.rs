//! Parser for Schedoscope-style view patterns (`package/ViewType/param/...`) that address one or many views.
//!
//! A pattern names a package, one or more view types and, per parameter position, a *segment* that may expand to
//! several alternatives (`e(SHOP10,SHOP20)`, `rym(201505-201410)`, ...). The views addressed are every view type
//! combined with every element of the cartesian product of the segments' alternatives.
//!
//! Processing order per `/`-separated segment, mirroring Schedoscope's `ViewUrlParser`:
//! 1. percent-decode (UTF-8), so `%28` behaves exactly like `(`;
//! 2. resolve backslash escapes (`\\ \, \( \) \-`), which turn a reserved character into a literal one;
//! 3. recognise the form (`name(...)`) or a plain string, tolerating whitespace around tokens.
//!
//! Unlike Schedoscope, anything that *looks* like a form but is malformed (`i(abc)`, `x(1)`, `rym(2015-13)`) is an
//! error rather than silently becoming a string parameter: a typo in a pattern should not address a view that does
//! not exist. Error columns are 1-based character positions in the original, undecoded text.

/// A parsed view pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// The package, e.g. `shop.datamart`.
    pub package: String,
    /// The addressed view types (one, or several with `e(A,B)`); all share the same parameters.
    pub view_types: Vec<String>,
    /// The parameter segments, in path order.
    pub segments: Vec<Segment>,
}

/// One parameter segment: its alternatives; each alternative is one or more path components (ym gives 2, ymd 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Never empty for a parsed pattern; all alternatives of one segment have the same number of components.
    pub alternatives: Vec<Vec<String>>,
    /// 1-based character column of the segment's first character in the original text.
    pub column: usize,
}

/// Why a pattern was rejected, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid view pattern at column {column}: {message} (a pattern is package/ViewType[/parameter...], e.g. \
     shop.datamart/DailySales/SHOP10/rymd(20150501-20150531); see docs/view-patterns.md)"
)]
pub struct PatternError {
    /// 1-based character column in the original text of the offending token (one past the end if something is
    /// missing at the end).
    pub column: usize,
    /// A single-line description of the problem.
    pub message: String,
}

/// Upper bound on the alternatives of a single segment. Ranges are expanded eagerly, so without a bound a pattern
/// such as `rymd(00000101-99991231)` (3.6 million days) would allocate hundreds of megabytes from one short
/// request; 100 000 still covers more than 270 years of days.
const MAX_SEGMENT_ALTERNATIVES: usize = 100_000;

/// Listed in the "unknown form" message so that a typo can be corrected without opening the docs.
const KNOWN_FORMS: &str = "i, l, b, t, f, d, ym, ymd, rym, rymd, e, ei, el, eb, et, ef, ed, eym, eymd, erym, erymd";

/// Parses a view pattern such as `shop.datamart/e(DailySales,MonthlySales)/SHOP10/rym(201505-201410)`.
pub fn parse(text: &str) -> Result<Pattern, PatternError> {
    let chars: Vec<char> = text.chars().collect();
    let end_col = chars.len() + 1;

    // One leading and one trailing `/` are accepted (Schedoscope took `/a/B/`, `a/B` and mixes); any further
    // slash produces an empty segment below, which is an error.
    let mut start = 0;
    let mut end = chars.len();
    if chars.first() == Some(&'/') {
        start = 1;
    }
    if end > start && chars[end - 1] == '/' {
        end -= 1;
    }

    // Split on `/` before decoding, as Schedoscope does: a `%2F` therefore stays inside its segment as a literal
    // slash, and `/` can never be escaped with a backslash.
    let mut pieces: Vec<(usize, &[char])> = Vec::new();
    if start < end {
        let mut piece_start = start;
        for i in start..=end {
            if i == end || chars[i] == '/' {
                pieces.push((piece_start, &chars[piece_start..i]));
                piece_start = i + 1;
            }
        }
    }
    for &(at, piece) in &pieces {
        if piece.is_empty() {
            return Err(error(at + 1, "empty segment; remove the extra `/`"));
        }
    }
    if pieces.len() < 2 {
        return Err(error(end_col, "a pattern needs at least package/ViewType"));
    }

    // Segments are processed strictly in order so that the reported error is always the leftmost one.
    let mut package = String::new();
    let mut view_types = Vec::new();
    let mut segments = Vec::with_capacity(pieces.len() - 2);
    for (index, &(at, piece)) in pieces.iter().enumerate() {
        let column = at + 1;
        let lexemes = lex(&percent_decode(piece, column)?)?;
        match index {
            0 => package = parse_package(&lexemes, column)?,
            1 => view_types = parse_view_types(&lexemes, column)?,
            _ => segments.push(Segment { alternatives: parse_parameter(&lexemes, column)?, column }),
        }
    }
    Ok(Pattern { package, view_types, segments })
}

impl Pattern {
    /// How many parameter lists the cartesian product has (saturating).
    pub fn count(&self) -> usize {
        self.segments.iter().fold(1usize, |product, segment| product.saturating_mul(segment.alternatives.len()))
    }

    /// The cartesian product across segments, in order, each a flat list of components.
    ///
    /// The last segment varies fastest (like nested loops written in path order, and like Schedoscope). A pattern
    /// without parameter segments yields exactly one, empty, list. The product is produced lazily because it can
    /// be far larger than the segments themselves.
    pub fn parameter_lists(&self) -> impl Iterator<Item = Vec<String>> + '_ {
        let mut indices = vec![0usize; self.segments.len()];
        // Public fields allow hand-built segments without alternatives; their product is empty.
        let mut done = self.segments.iter().any(|segment| segment.alternatives.is_empty());
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let list = self
                .segments
                .iter()
                .zip(&indices)
                .flat_map(|(segment, &index)| segment.alternatives[index].iter().cloned())
                .collect();
            // Odometer step: bump the last position, carrying leftwards; a full carry means we are finished.
            done = true;
            for (index, segment) in indices.iter_mut().zip(&self.segments).rev() {
                *index += 1;
                if *index < segment.alternatives.len() {
                    done = false;
                    break;
                }
                *index = 0;
            }
            Some(list)
        })
    }
}

fn error(column: usize, message: impl Into<String>) -> PatternError {
    PatternError { column, message: message.into() }
}

/// Shortens user text quoted in messages so that a huge value cannot produce a huge error line.
fn quote(text: &str) -> String {
    const LIMIT: usize = 40;
    if text.chars().count() <= LIMIT { text.to_owned() } else { text.chars().take(LIMIT - 1).chain(['…']).collect() }
}

/// A decoded character together with the column of the original text it came from (for `%XX` the column of `%`).
#[derive(Debug, Clone, Copy)]
struct Spanned {
    ch: char,
    col: usize,
}

/// Percent-decodes one segment as UTF-8 while remembering where each decoded character came from.
///
/// Hand-rolled rather than via the `percent-encoding` crate because that crate cannot report source positions and
/// silently passes malformed escapes through, whereas a stray `%` is almost always a mistake worth pointing at.
/// `+` is kept as is (RFC 3986 paths), unlike Java's form-decoding `URLDecoder` that Schedoscope used.
fn percent_decode(chars: &[char], first_col: usize) -> Result<Vec<Spanned>, PatternError> {
    let mut bytes: Vec<(u8, usize)> = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let col = first_col + i;
        if chars[i] == '%' {
            let hex = |k: usize| chars.get(k).and_then(|c| c.to_digit(16));
            let (Some(high), Some(low)) = (hex(i + 1), hex(i + 2)) else {
                return Err(error(
                    col,
                    "`%` must start a percent-escape of two hex digits such as %2F (write %25 for a literal `%`)",
                ));
            };
            // Both digits are below 16, so the value fits a byte.
            bytes.push((u8::try_from(high * 16 + low).unwrap_or(u8::MAX), col));
            i += 3;
        } else {
            let mut buffer = [0; 4];
            bytes.extend(chars[i].encode_utf8(&mut buffer).bytes().map(|byte| (byte, col)));
            i += 1;
        }
    }
    let raw: Vec<u8> = bytes.iter().map(|&(byte, _)| byte).collect();
    let decoded = std::str::from_utf8(&raw).map_err(|e| {
        let col = bytes.get(e.valid_up_to()).map_or(first_col, |&(_, col)| col);
        error(col, "percent-escapes do not decode to valid UTF-8")
    })?;
    Ok(decoded.char_indices().map(|(at, ch)| Spanned { ch, col: bytes[at].1 }).collect())
}

/// A character after escape processing. `special` marks an unescaped reserved character (`( ) , -`), the only
/// ones that carry syntax; an escaped one is ordinary text and keeps the column of its backslash.
#[derive(Debug, Clone, Copy)]
struct Lexeme {
    ch: char,
    col: usize,
    special: bool,
}

fn lex(decoded: &[Spanned]) -> Result<Vec<Lexeme>, PatternError> {
    let mut out = Vec::with_capacity(decoded.len());
    let mut iter = decoded.iter();
    while let Some(&Spanned { ch, col }) = iter.next() {
        match ch {
            '\\' => match iter.next() {
                Some(&Spanned { ch: escaped @ ('\\' | ',' | '(' | ')' | '-'), .. }) => {
                    out.push(Lexeme { ch: escaped, col, special: false });
                }
                // Schedoscope kept unknown escapes verbatim; rejecting them keeps room for future escapes and
                // catches attempts like `\/`, which cannot work because `/` splits segments before escaping.
                Some(&Spanned { ch: other, .. }) => {
                    return Err(error(
                        col,
                        format!(
                            "`\\{}` is not an escape; only \\\\ \\, \\( \\) \\- are (a `/` must be written %2F)",
                            other.escape_debug()
                        ),
                    ));
                }
                None => {
                    return Err(error(
                        col,
                        "a backslash at the end of a segment escapes nothing; write \\\\ for a literal backslash \
                         (a `/` must be written %2F)",
                    ));
                }
            },
            '(' | ')' | ',' | '-' => out.push(Lexeme { ch, col, special: true }),
            // Control characters (including newlines and tabs) would end up in paths, table partitions and
            // single-line messages; no legitimate parameter contains one.
            c if c.is_control() => {
                return Err(error(col, format!("control character U+{:04X} is not allowed", u32::from(c))));
            }
            _ => out.push(Lexeme { ch, col, special: false }),
        }
    }
    Ok(out)
}

fn trim(lexemes: &[Lexeme]) -> &[Lexeme] {
    let start = lexemes.iter().position(|l| !l.ch.is_whitespace()).unwrap_or(lexemes.len());
    let end = lexemes.iter().rposition(|l| !l.ch.is_whitespace()).map_or(start, |i| i + 1);
    &lexemes[start..end]
}

fn text(lexemes: &[Lexeme]) -> String {
    lexemes.iter().map(|l| l.ch).collect()
}

/// Column of the first lexeme, or `fallback` for an empty slice (keeps error reporting panic-free).
fn first_col(lexemes: &[Lexeme], fallback: usize) -> usize {
    lexemes.first().map_or(fallback, |l| l.col)
}

fn is_special(lexeme: &Lexeme, ch: char) -> bool {
    lexeme.special && lexeme.ch == ch
}

/// The coarse structure of a segment: a plain string or exactly one `name(...)` form.
enum Shape<'a> {
    /// Trimmed, non-empty text without unescaped parentheses.
    Plain(&'a [Lexeme]),
    Form {
        name: String,
        name_col: usize,
        open_col: usize,
        /// Everything between the parentheses, untrimmed; contains no unescaped parenthesis.
        inner: &'a [Lexeme],
        close_col: usize,
    },
}

fn shape(lexemes: &[Lexeme], segment_col: usize) -> Result<Shape<'_>, PatternError> {
    let lexemes = trim(lexemes);
    if lexemes.is_empty() {
        return Err(error(segment_col, "empty segment; remove the extra `/`"));
    }
    // Problems are reported left to right, so the first thing the user has to fix is the first one shown.
    let Some(open) = lexemes.iter().position(|l| l.special && (l.ch == '(' || l.ch == ')')) else {
        return Ok(Shape::Plain(lexemes));
    };
    let open_col = lexemes[open].col;
    if lexemes[open].ch == ')' {
        return Err(unmatched_close(open_col));
    }
    let name_lexemes = trim(&lexemes[..open]);
    let name = text(name_lexemes);
    let name_col = first_col(name_lexemes, open_col);
    if name.is_empty() {
        return Err(error(
            open_col,
            "`(` must follow a form name such as i( or e( (write \\( for a literal parenthesis)",
        ));
    }
    let Some(close) = lexemes[open + 1..].iter().position(|l| l.special && (l.ch == '(' || l.ch == ')')) else {
        return Err(error(
            open_col,
            format!(
                "unbalanced parentheses: this `(` of `{}(..)` is never closed (write \\( for a literal parenthesis)",
                quote(&name)
            ),
        ));
    };
    let close = open + 1 + close;
    if lexemes[close].ch == '(' {
        return Err(error(
            lexemes[close].col,
            format!(
                "forms cannot be nested inside `{}(..)`; use a typed enumeration such as ei(1,2) instead of \
                 e(i(1),i(2)), or write \\( for a literal parenthesis",
                quote(&name)
            ),
        ));
    }
    // The segment is trimmed, so any lexeme after `close` means a non-whitespace one follows the form.
    if let Some(extra) = lexemes[close + 1..].iter().find(|l| !l.ch.is_whitespace()) {
        if is_special(extra, ')') {
            return Err(unmatched_close(extra.col));
        }
        return Err(error(
            extra.col,
            format!("unexpected `{}` after `{}(..)`; a segment holds exactly one form", extra.ch, quote(&name)),
        ));
    }
    Ok(Shape::Form { name, name_col, open_col, inner: &lexemes[open + 1..close], close_col: lexemes[close].col })
}

fn unmatched_close(col: usize) -> PatternError {
    error(col, "unbalanced parentheses: `)` has no matching `(` (write \\) for a literal parenthesis)")
}

fn parse_package(lexemes: &[Lexeme], col: usize) -> Result<String, PatternError> {
    // Checked before `shape` so that `sh(op` is reported as a misplaced parenthesis, not as an unclosed form.
    if let Some(paren) = lexemes.iter().find(|l| l.special && (l.ch == '(' || l.ch == ')')) {
        return Err(error(
            paren.col,
            format!("the package must be a plain name such as shop.datamart; `{}` is not allowed here", paren.ch),
        ));
    }
    match shape(lexemes, col)? {
        Shape::Plain(name) => Ok(text(name)),
        // Unreachable after the check above, but an error is a safer answer than a panic.
        Shape::Form { open_col, .. } => Err(error(open_col, "the package must be a plain name such as shop.datamart")),
    }
}

fn parse_view_types(lexemes: &[Lexeme], col: usize) -> Result<Vec<String>, PatternError> {
    match shape(lexemes, col)? {
        Shape::Plain(name) => Ok(vec![text(name)]),
        Shape::Form { name, name_col, inner, close_col, .. } if name == "e" => {
            Ok(enumeration("e", None, inner, name_col, close_col)?.into_iter().flatten().collect())
        }
        Shape::Form { name, name_col, .. } => Err(error(
            name_col,
            format!(
                "the view type must be a name or an enumeration e(A,B); `{}(..)` is not allowed here",
                quote(&name)
            ),
        )),
    }
}

/// A typed single-value form; enumerations `eX(..)` apply the same kind to each element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Long,
    Byte,
    Bool,
    Float,
    Double,
    Month,
    Day,
    MonthRange,
    DayRange,
}

impl Kind {
    fn from_name(name: &str) -> Option<Kind> {
        Some(match name {
            "i" => Kind::Int,
            "l" => Kind::Long,
            "b" => Kind::Byte,
            "t" => Kind::Bool,
            "f" => Kind::Float,
            "d" => Kind::Double,
            "ym" => Kind::Month,
            "ymd" => Kind::Day,
            "rym" => Kind::MonthRange,
            "rymd" => Kind::DayRange,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Int => "i",
            Kind::Long => "l",
            Kind::Byte => "b",
            Kind::Bool => "t",
            Kind::Float => "f",
            Kind::Double => "d",
            Kind::Month => "ym",
            Kind::Day => "ymd",
            Kind::MonthRange => "rym",
            Kind::DayRange => "rymd",
        }
    }

    fn example(self) -> &'static str {
        match self {
            Kind::Int | Kind::Long | Kind::Byte => "42",
            Kind::Bool => "true",
            Kind::Float | Kind::Double => "5.23",
            Kind::Month => "201505",
            Kind::Day => "20150501",
            Kind::MonthRange => "201505-201410",
            Kind::DayRange => "20150501-20150531",
        }
    }
}

fn parse_parameter(lexemes: &[Lexeme], col: usize) -> Result<Vec<Vec<String>>, PatternError> {
    let (name, name_col, inner, close_col) = match shape(lexemes, col)? {
        Shape::Plain(value) => {
            // `*` would otherwise be a value like any other, and a run of
            // `DailySales/*/2015/05/01` materialize a shop named `*`.
            if let Some(star) = value.iter().find(|l| l.ch == '*') {
                return Err(error(
                    star.col,
                    "`*` is not a wildcard in a view pattern; name the values with e(SHOP10,SHOP20) \
                     or a range such as rymd(20150501-20150531) (see docs/view-patterns.md)",
                ));
            }
            return Ok(vec![vec![text(value)]]);
        }
        Shape::Form { name, name_col, inner, close_col, .. } => (name, name_col, inner, close_col),
    };
    if name == "null" {
        return Err(error(name_col, "`null()` is not supported: trellis parameters cannot be null"));
    }
    if let Some(kind) = Kind::from_name(&name) {
        let mut alternatives = Vec::new();
        typed(kind, trim(inner), name_col, &mut alternatives)?;
        return Ok(alternatives);
    }
    if let Some(element) = name.strip_prefix('e') {
        if element.is_empty() {
            return enumeration(&name, None, inner, name_col, close_col);
        }
        if let Some(kind) = Kind::from_name(element) {
            return enumeration(&name, Some(kind), inner, name_col, close_col);
        }
    }
    Err(error(
        name_col,
        format!(
            "unknown form `{}(..)`; known forms are {KNOWN_FORMS} (write \\( for a literal parenthesis)",
            quote(&name)
        ),
    ))
}

/// `e(..)` (strings, `kind == None`) or `eX(..)`: splits on unescaped commas and concatenates the elements'
/// alternatives in order. Duplicates are kept, as in Schedoscope.
fn enumeration(
    name: &str,
    kind: Option<Kind>,
    inner: &[Lexeme],
    name_col: usize,
    close_col: usize,
) -> Result<Vec<Vec<String>>, PatternError> {
    if trim(inner).is_empty() {
        let example = kind.map_or("a,b", Kind::example);
        return Err(error(
            name_col,
            format!("empty enumeration `{name}()`; list at least one value, e.g. {name}({example})"),
        ));
    }
    let mut alternatives = Vec::new();
    let mut element_start = 0;
    for i in 0..=inner.len() {
        let delimiter_col = match inner.get(i) {
            None => close_col,
            Some(l) if is_special(l, ',') => l.col,
            Some(_) => continue,
        };
        let element = trim(&inner[element_start..i]);
        element_start = i + 1;
        if element.is_empty() {
            return Err(error(
                delimiter_col,
                format!("empty value in `{name}(..)`; remove the extra `,` (write \\, for a literal comma)"),
            ));
        }
        match kind {
            None => push_limited(&mut alternatives, vec![vec![text(element)]], 1, element[0].col)?,
            Some(kind) => typed(kind, element, element[0].col, &mut alternatives)?,
        }
    }
    Ok(alternatives)
}

/// Appends `count` alternatives produced by `make` unless that would exceed `MAX_SEGMENT_ALTERNATIVES`. The count
/// is checked before `make` runs so that an oversized range is never materialised.
fn push_limited<I: IntoIterator<Item = Vec<String>>>(
    alternatives: &mut Vec<Vec<String>>,
    make: I,
    count: usize,
    col: usize,
) -> Result<(), PatternError> {
    let total = alternatives.len().saturating_add(count);
    if total > MAX_SEGMENT_ALTERNATIVES {
        return Err(error(
            col,
            format!(
                "this segment expands to at least {total} alternatives; at most {MAX_SEGMENT_ALTERNATIVES} are \
                 allowed per segment (split the range into several patterns)"
            ),
        ));
    }
    alternatives.extend(make);
    Ok(())
}

/// Evaluates one typed value (`value` is trimmed; `form_col` locates the form for "missing value" errors).
fn typed(kind: Kind, value: &[Lexeme], form_col: usize, out: &mut Vec<Vec<String>>) -> Result<(), PatternError> {
    let name = kind.name();
    if value.is_empty() {
        return Err(error(form_col, format!("`{name}()` needs a value, e.g. {name}({})", kind.example())));
    }
    let col = value[0].col;
    // Only ranges give `-` a meaning; everywhere else it is ordinary text, e.g. the sign in `i(-5)`.
    let single = match kind {
        Kind::Int => integer::<i32>(value, name, "a 32-bit integer (-2147483648..=2147483647)")?,
        Kind::Long => integer::<i64>(value, name, "a 64-bit integer (-9223372036854775808..=9223372036854775807)")?,
        Kind::Byte => integer::<i8>(value, name, "a byte (-128..=127)")?,
        Kind::Bool => match text(value).as_str() {
            boolean @ ("true" | "false") => vec![boolean.to_owned()],
            other => {
                return Err(error(col, format!("`t(..)` expects true or false, got `{}`", quote(other))));
            }
        },
        Kind::Float | Kind::Double => {
            let literal = text(value);
            if !is_float_literal(&literal) {
                return Err(error(
                    col,
                    format!("`{name}(..)` expects a decimal number such as 5.23 or -1e10, got `{}`", quote(&literal)),
                ));
            }
            // Kept verbatim: re-formatting would change the text users see and gains nothing for a path value.
            vec![literal]
        }
        Kind::Month => {
            let (year, month) = year_month(value, name)?;
            vec![format!("{year:04}"), format!("{month:02}")]
        }
        Kind::Day => {
            let (year, month, day) = year_month_day(value, name)?;
            vec![format!("{year:04}"), format!("{month:02}"), format!("{day:02}")]
        }
        Kind::MonthRange => {
            let (from, to) = range_ends(value, kind)?;
            let (a, b) = (year_month(from, name)?, year_month(to, name)?);
            let (a, b) = (a.0 * 12 + a.1 - 1, b.0 * 12 + b.1 - 1);
            // Either order is accepted; the expansion is always chronological (Schedoscope listed newest first).
            let (low, high) = (a.min(b), a.max(b));
            let count = usize::try_from(high - low + 1).unwrap_or(usize::MAX);
            let months = (low..=high).map(|m| vec![format!("{:04}", m / 12), format!("{:02}", m % 12 + 1)]);
            return push_limited(out, months, count, col);
        }
        Kind::DayRange => {
            let (from, to) = range_ends(value, kind)?;
            let (a, b) = (year_month_day(from, name)?, year_month_day(to, name)?);
            let (low, high) = if day_number(a) <= day_number(b) { (a, b) } else { (b, a) };
            let count = usize::try_from(day_number(high) - day_number(low) + 1).unwrap_or(usize::MAX);
            let days = std::iter::successors(Some(low), |&date| Some(next_day(date)))
                .take(count)
                .map(|(y, m, d)| vec![format!("{y:04}"), format!("{m:02}"), format!("{d:02}")]);
            return push_limited(out, days, count, col);
        }
    };
    push_limited(out, [single], 1, col)
}

/// Validates an optionally signed decimal integer and renders it canonically (`007` -> `7`, `-0` -> `0`).
/// A sign is an extension: Schedoscope's `\d+` rejected negative numbers although the types allow them.
fn integer<T>(value: &[Lexeme], name: &str, what: &str) -> Result<Vec<String>, PatternError>
where
    T: std::str::FromStr + ToString,
{
    let literal = text(value);
    let digits = literal.strip_prefix(['+', '-']).unwrap_or(&literal);
    let col = first_col(value, 0);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(error(
            col,
            format!("`{name}(..)` expects an integer such as {name}(42), got `{}`", quote(&literal)),
        ));
    }
    match literal.parse::<T>() {
        Ok(number) => Ok(vec![number.to_string()]),
        Err(_) => Err(error(col, format!("`{}` is out of range for `{name}(..)`, which is {what}", quote(&literal)))),
    }
}

/// Schedoscope's float syntax `[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?`: note that `5.` is rejected (a dot needs a
/// digit after it) while `.5` is accepted.
fn is_float_literal(literal: &str) -> bool {
    let bytes = literal.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let integer_digits = digits(&mut i);
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else if integer_digits == 0 {
        return false;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == bytes.len()
}

/// Splits a range on its single unescaped `-` into two trimmed, non-empty ends.
fn range_ends(value: &[Lexeme], kind: Kind) -> Result<(&[Lexeme], &[Lexeme]), PatternError> {
    let name = kind.name();
    let what = if kind == Kind::MonthRange { "month" } else { "day" };
    let mut dashes = value.iter().enumerate().filter(|(_, l)| is_special(l, '-'));
    let Some((dash, dash_lexeme)) = dashes.next() else {
        return Err(error(
            value[0].col,
            format!("`{name}(..)` needs two {what}s joined by `-`, e.g. {name}({})", kind.example()),
        ));
    };
    if let Some((_, second)) = dashes.next() {
        return Err(error(second.col, format!("`{name}(..)` takes exactly two {what}s joined by one `-`")));
    }
    let (from, to) = (trim(&value[..dash]), trim(&value[dash + 1..]));
    if from.is_empty() || to.is_empty() {
        let side = if from.is_empty() { "before" } else { "after" };
        return Err(error(
            dash_lexeme.col,
            format!("`{name}(..)` is missing the {what} {side} `-`, e.g. {name}({})", kind.example()),
        ));
    }
    Ok((from, to))
}

/// Parses exactly `digits` ASCII digits; `None` otherwise.
fn fixed_digits(value: &[Lexeme], digits: usize) -> Option<Vec<u32>> {
    if value.len() != digits {
        return None;
    }
    value.iter().map(|l| l.ch.to_digit(10).filter(|_| l.ch.is_ascii_digit())).collect()
}

fn number(digits: &[u32]) -> u32 {
    digits.iter().fold(0, |acc, d| acc * 10 + d)
}

fn year_month(value: &[Lexeme], name: &str) -> Result<(u32, u32), PatternError> {
    let col = first_col(value, 0);
    let Some(digits) = fixed_digits(value, 6) else {
        return Err(error(
            col,
            format!("`{name}(..)` expects a month as yyyyMM, e.g. 201505; got `{}`", quote(&text(value))),
        ));
    };
    let (year, month) = (number(&digits[..4]), number(&digits[4..]));
    if !(1..=12).contains(&month) {
        return Err(error(value[4].col, format!("month {month:02} does not exist (in `{}`)", text(value))));
    }
    Ok((year, month))
}

fn year_month_day(value: &[Lexeme], name: &str) -> Result<(u32, u32, u32), PatternError> {
    let col = first_col(value, 0);
    let Some(digits) = fixed_digits(value, 8) else {
        return Err(error(
            col,
            format!("`{name}(..)` expects a day as yyyyMMdd, e.g. 20150501; got `{}`", quote(&text(value))),
        ));
    };
    let (year, month, day) = (number(&digits[..4]), number(&digits[4..6]), number(&digits[6..]));
    if !(1..=12).contains(&month) {
        return Err(error(value[4].col, format!("month {month:02} does not exist (in `{}`)", text(value))));
    }
    let length = days_in_month(year, month);
    if !(1..=length).contains(&day) {
        return Err(error(
            value[6].col,
            format!(
                "day {day:02} does not exist (in `{}`): {} {year:04} has {length} days",
                text(value),
                super::time::MONTHS[month as usize - 1]
            ),
        ));
    }
    Ok((year, month, day))
}

/// Proleptic Gregorian calendar, so 2000 and 2016 are leap years and 1900 is not.
fn is_leap_year(year: u32) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since an arbitrary epoch (Howard Hinnant's `days_from_civil`), used to order and count day ranges.
fn day_number((year, month, day): (u32, u32, u32)) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let year = i64::from(year) - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era
}

fn next_day((year, month, day): (u32, u32, u32)) -> (u32, u32, u32) {
    if day < days_in_month(year, month) {
        (year, month, day + 1)
    } else if month < 12 {
        (year, month + 1, 1)
    } else {
        (year + 1, 1, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};
    use std::fmt::Write as _;

    /// Renders a parse result for snapshot comparison: the pattern and its expanded parameter lists, or the
    /// pattern with a caret under the error column (so a wrong column is visible at a glance) and the message.
    fn render(text: &str) -> String {
        let mut out = String::new();
        match parse(text) {
            Ok(pattern) => {
                let lists: Vec<Vec<String>> = pattern.parameter_lists().collect();
                assert_eq!(lists.len(), pattern.count(), "count() must agree with parameter_lists()");
                for segment in &pattern.segments {
                    let width = segment.alternatives[0].len();
                    assert!(segment.alternatives.iter().all(|a| a.len() == width), "ragged segment in {text:?}");
                }
                writeln!(out, "package: {}", pattern.package).unwrap();
                writeln!(out, "view types: {}", pattern.view_types.join(", ")).unwrap();
                writeln!(out, "count: {}", pattern.count()).unwrap();
                if lists.len() <= 12 {
                    lists.iter().for_each(|list| writeln!(out, "{list:?}").unwrap());
                } else {
                    lists[..3].iter().for_each(|list| writeln!(out, "{list:?}").unwrap());
                    writeln!(out, "...").unwrap();
                    lists[lists.len() - 3..].iter().for_each(|list| writeln!(out, "{list:?}").unwrap());
                }
            }
            Err(e) => {
                // One display character per column, so the caret lines up even for control characters.
                let shown: String = text.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
                writeln!(out, "{shown}").unwrap();
                writeln!(out, "{}^", " ".repeat(e.column - 1)).unwrap();
                writeln!(out, "column {}: {}", e.column, e.message).unwrap();
            }
        }
        out
    }

    fn check(text: &str, expect: Expect) {
        expect.assert_eq(&render(text));
    }

    #[test]
    fn plain_patterns() {
        check(
            "shop.datamart/DailySales/SHOP10/2015/05/01",
            expect![[r#"
            package: shop.datamart
            view types: DailySales
            count: 1
            ["SHOP10", "2015", "05", "01"]
        "#]],
        );
        check(
            "/shop.datamart/DailySales/",
            expect![[r#"
            package: shop.datamart
            view types: DailySales
            count: 1
            []
        "#]],
        );
        check(
            "/test.views/Product/EC0106/2014/01/12/",
            expect![[r#"
            package: test.views
            view types: Product
            count: 1
            ["EC0106", "2014", "01", "12"]
        "#]],
        );
        check(
            "shop.datamart/DailySales/SHOP-10/a,b/Zürich",
            expect![[r#"
            package: shop.datamart
            view types: DailySales
            count: 1
            ["SHOP-10", "a,b", "Zürich"]
        "#]],
        );
    }

    #[test]
    fn view_type_enumeration() {
        check(
            "shop.datamart/e(DailySales,MonthlySales)/SHOP10",
            expect![[r#"
            package: shop.datamart
            view types: DailySales, MonthlySales
            count: 1
            ["SHOP10"]
        "#]],
        );
        check(
            "shop.datamart/e(DailySales,MonthlySales)/e(SHOP10,SHOP20)/rym(201505-201410)",
            expect![[r#"
            package: shop.datamart
            view types: DailySales, MonthlySales
            count: 16
            ["SHOP10", "2014", "10"]
            ["SHOP10", "2014", "11"]
            ["SHOP10", "2014", "12"]
            ...
            ["SHOP20", "2015", "03"]
            ["SHOP20", "2015", "04"]
            ["SHOP20", "2015", "05"]
        "#]],
        );
        check(
            "shop.datamart/e(DailySales)",
            expect![[r#"
            package: shop.datamart
            view types: DailySales
            count: 1
            []
        "#]],
        );
    }

    #[test]
    fn scalar_forms() {
        check(
            "p/V/i(007)/i(-12)/i(+0)/i(2147483647)/i(-2147483648)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["7", "-12", "0", "2147483647", "-2147483648"]
        "#]],
        );
        check(
            "p/V/l(9223372036854775807)/l(-9223372036854775808)/b(127)/b(-128)/b(0010)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["9223372036854775807", "-9223372036854775808", "127", "-128", "10"]
        "#]],
        );
        check(
            "p/V/t(true)/t(false)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["true", "false"]
        "#]],
        );
        check(
            "p/V/f(5.23)/f(.5)/f(-1)/d(+1.5e10)/d(2E-3)/d(007.10)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["5.23", ".5", "-1", "+1.5e10", "2E-3", "007.10"]
        "#]],
        );
        check(
            "p/V/ym(201505)/ymd(20160229)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["2015", "05", "2016", "02", "29"]
        "#]],
        );
    }

    #[test]
    fn ranges() {
        check(
            "shop.raw/Orders/SHOP10/rymd(20150501-20141015)",
            expect![[r#"
            package: shop.raw
            view types: Orders
            count: 199
            ["SHOP10", "2014", "10", "15"]
            ["SHOP10", "2014", "10", "16"]
            ["SHOP10", "2014", "10", "17"]
            ...
            ["SHOP10", "2015", "04", "29"]
            ["SHOP10", "2015", "04", "30"]
            ["SHOP10", "2015", "05", "01"]
        "#]],
        );
        check(
            "p/V/rym(201401-201312)",
            expect![[r#"
            package: p
            view types: V
            count: 2
            ["2013", "12"]
            ["2014", "01"]
        "#]],
        );
        check(
            "p/V/rym(201312-201401)",
            expect![[r#"
            package: p
            view types: V
            count: 2
            ["2013", "12"]
            ["2014", "01"]
        "#]],
        );
        check(
            "p/V/rym(201505-201505)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["2015", "05"]
        "#]],
        );
        check(
            "p/V/rymd(20150101-20150101)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["2015", "01", "01"]
        "#]],
        );
        check(
            "p/V/rymd(20151230-20160102)",
            expect![[r#"
            package: p
            view types: V
            count: 4
            ["2015", "12", "30"]
            ["2015", "12", "31"]
            ["2016", "01", "01"]
            ["2016", "01", "02"]
        "#]],
        );
    }

    #[test]
    fn leap_years() {
        check(
            "p/V/rymd(20160227-20160302)",
            expect![[r#"
            package: p
            view types: V
            count: 5
            ["2016", "02", "27"]
            ["2016", "02", "28"]
            ["2016", "02", "29"]
            ["2016", "03", "01"]
            ["2016", "03", "02"]
        "#]],
        );
        check(
            "p/V/rymd(20150302-20150227)",
            expect![[r#"
            package: p
            view types: V
            count: 4
            ["2015", "02", "27"]
            ["2015", "02", "28"]
            ["2015", "03", "01"]
            ["2015", "03", "02"]
        "#]],
        );
        check(
            "p/V/rymd(19000227-19000301)",
            expect![[r#"
            package: p
            view types: V
            count: 3
            ["1900", "02", "27"]
            ["1900", "02", "28"]
            ["1900", "03", "01"]
        "#]],
        );
        check(
            "p/V/rymd(20000227-20000301)",
            expect![[r#"
            package: p
            view types: V
            count: 4
            ["2000", "02", "27"]
            ["2000", "02", "28"]
            ["2000", "02", "29"]
            ["2000", "03", "01"]
        "#]],
        );
        check(
            "p/V/ymd(20000229)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["2000", "02", "29"]
        "#]],
        );
        check(
            "p/V/ymd(19000229)",
            expect![[r#"
            p/V/ymd(19000229)
                          ^
            column 15: day 29 does not exist (in `19000229`): February 1900 has 28 days
        "#]],
        );
        check(
            "p/V/ymd(20150229)",
            expect![[r#"
            p/V/ymd(20150229)
                          ^
            column 15: day 29 does not exist (in `20150229`): February 2015 has 28 days
        "#]],
        );
    }

    #[test]
    fn enumerations() {
        check(
            "p/V/e(a, b ,c)",
            expect![[r#"
            package: p
            view types: V
            count: 3
            ["a"]
            ["b"]
            ["c"]
        "#]],
        );
        check(
            "p/V/ei(1,02,-3)/el(10000000000)",
            expect![[r#"
            package: p
            view types: V
            count: 3
            ["1", "10000000000"]
            ["2", "10000000000"]
            ["-3", "10000000000"]
        "#]],
        );
        check(
            "p/V/eb(1,2)/et(true,false)",
            expect![[r#"
            package: p
            view types: V
            count: 4
            ["1", "true"]
            ["1", "false"]
            ["2", "true"]
            ["2", "false"]
        "#]],
        );
        check(
            "p/V/ef(1.5,2)/ed(-0.5e3)",
            expect![[r#"
            package: p
            view types: V
            count: 2
            ["1.5", "-0.5e3"]
            ["2", "-0.5e3"]
        "#]],
        );
        check(
            "p/V/eym(201501,201612)",
            expect![[r#"
            package: p
            view types: V
            count: 2
            ["2015", "01"]
            ["2016", "12"]
        "#]],
        );
        check(
            "p/V/eymd(20150101,20160229)",
            expect![[r#"
            package: p
            view types: V
            count: 2
            ["2015", "01", "01"]
            ["2016", "02", "29"]
        "#]],
        );
        check(
            "p/V/erym(201402-201401,201406-201405)",
            expect![[r#"
            package: p
            view types: V
            count: 4
            ["2014", "01"]
            ["2014", "02"]
            ["2014", "05"]
            ["2014", "06"]
        "#]],
        );
        check(
            "p/V/erymd(20151231-20160101,20160229-20160228)",
            expect![[r#"
            package: p
            view types: V
            count: 4
            ["2015", "12", "31"]
            ["2016", "01", "01"]
            ["2016", "02", "28"]
            ["2016", "02", "29"]
        "#]],
        );
        check(
            "p/V/e(x,x)",
            expect![[r#"
            package: p
            view types: V
            count: 2
            ["x"]
            ["x"]
        "#]],
        );
        check(
            "p/V/e(SHOP-10,a-b)",
            expect![[r#"
            package: p
            view types: V
            count: 2
            ["SHOP-10"]
            ["a-b"]
        "#]],
        );
    }

    #[test]
    fn schedoscope_cartesian_product() {
        // ViewUrlParserTest "permutate argument value ranges": 85 days x 3 months x 2 numbers.
        check(
            "test.views/Product/EC0106/rymd(20140224-20131202)/rym(201402-201312)/ei(9,10)",
            expect![[r#"
            package: test.views
            view types: Product
            count: 510
            ["EC0106", "2013", "12", "02", "2013", "12", "9"]
            ["EC0106", "2013", "12", "02", "2013", "12", "10"]
            ["EC0106", "2013", "12", "02", "2014", "01", "9"]
            ...
            ["EC0106", "2014", "02", "24", "2014", "01", "10"]
            ["EC0106", "2014", "02", "24", "2014", "02", "9"]
            ["EC0106", "2014", "02", "24", "2014", "02", "10"]
        "#]],
        );
    }

    #[test]
    fn escapes() {
        check(
            r"p/V/null\(\)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["null()"]
        "#]],
        );
        check(
            r"p/V/a\,b/c\-d/back\\slash/\(x\)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["a,b", "c-d", "back\\slash", "(x)"]
        "#]],
        );
        check(
            r"p/V/e(a\,b,c\-d,x\)y,\(z\))",
            expect![[r#"
            package: p
            view types: V
            count: 4
            ["a,b"]
            ["c-d"]
            ["x)y"]
            ["(z)"]
        "#]],
        );
        check(
            r"p/e(Da\,ily,Mon\(thly\))",
            expect![[r#"
            package: p
            view types: Da,ily, Mon(thly)
            count: 1
            []
        "#]],
        );
        check(
            r"p/V/i\(5\)",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["i(5)"]
        "#]],
        );
    }

    #[test]
    fn whitespace_is_tolerated_around_tokens() {
        check(
            " p.q / V / i( 7 ) / e( a , b ) / t (true) / rym( 201401 - 201402 ) ",
            expect![[r#"
            package: p.q
            view types: V
            count: 4
            ["7", "a", "true", "2014", "01"]
            ["7", "a", "true", "2014", "02"]
            ["7", "b", "true", "2014", "01"]
            ["7", "b", "true", "2014", "02"]
        "#]],
        );
        check(
            "p/e( A , B )/SHOP 10",
            expect![[r#"
            package: p
            view types: A, B
            count: 1
            ["SHOP 10"]
        "#]],
        );
    }

    #[test]
    fn percent_decoding() {
        check(
            "p/V/SHOP%2010/Z%C3%BCrich/a%2Fb/100%25",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["SHOP 10", "Zürich", "a/b", "100%"]
        "#]],
        );
        check(
            "p/V/e%28a%2Cb%29/i%287%29",
            expect![[r#"
            package: p
            view types: V
            count: 2
            ["a", "7"]
            ["b", "7"]
        "#]],
        );
        check(
            "p/V/%5C%28x%5C%29",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["(x)"]
        "#]],
        );
        check(
            "p/e%28A,B%29/rym(201401%2D201402)",
            expect![[r#"
            package: p
            view types: A, B
            count: 2
            ["2014", "01"]
            ["2014", "02"]
        "#]],
        );
        check(
            "p/V/+1",
            expect![[r#"
            package: p
            view types: V
            count: 1
            ["+1"]
        "#]],
        );
    }

    #[test]
    fn structural_errors() {
        check(
            "",
            expect![[r#"

            ^
            column 1: a pattern needs at least package/ViewType
        "#]],
        );
        check(
            "/",
            expect![[r#"
            /
             ^
            column 2: a pattern needs at least package/ViewType
        "#]],
        );
        check(
            "shop.datamart",
            expect![[r#"
            shop.datamart
                         ^
            column 14: a pattern needs at least package/ViewType
        "#]],
        );
        check(
            "shop.datamart/",
            expect![[r#"
            shop.datamart/
                          ^
            column 15: a pattern needs at least package/ViewType
        "#]],
        );
        check(
            "a//b",
            expect![[r#"
            a//b
              ^
            column 3: empty segment; remove the extra `/`
        "#]],
        );
        check(
            "//a/B",
            expect![[r#"
            //a/B
             ^
            column 2: empty segment; remove the extra `/`
        "#]],
        );
        check(
            "a/B//",
            expect![[r#"
            a/B//
                ^
            column 5: empty segment; remove the extra `/`
        "#]],
        );
        check(
            "a/ /B",
            expect![[r#"
            a/ /B
              ^
            column 3: empty segment; remove the extra `/`
        "#]],
        );
        check(
            "sh(op/V",
            expect![[r#"
            sh(op/V
              ^
            column 3: the package must be a plain name such as shop.datamart; `(` is not allowed here
        "#]],
        );
    }

    #[test]
    fn form_errors() {
        check(
            "shop/Daily/x(1)",
            expect![[r#"
            shop/Daily/x(1)
                       ^
            column 12: unknown form `x(..)`; known forms are i, l, b, t, f, d, ym, ymd, rym, rymd, e, ei, el, eb, et, ef, ed, eym, eymd, erym, erymd (write \( for a literal parenthesis)
        "#]],
        );
        check(
            "shop/Daily/SHOP(10)",
            expect![[r#"
            shop/Daily/SHOP(10)
                       ^
            column 12: unknown form `SHOP(..)`; known forms are i, l, b, t, f, d, ym, ymd, rym, rymd, e, ei, el, eb, et, ef, ed, eym, eymd, erym, erymd (write \( for a literal parenthesis)
        "#]],
        );
        check(
            "shop/Daily/(10)",
            expect![[r#"
            shop/Daily/(10)
                       ^
            column 12: `(` must follow a form name such as i( or e( (write \( for a literal parenthesis)
        "#]],
        );
        check(
            "shop/Daily/null()",
            expect![[r#"
            shop/Daily/null()
                       ^
            column 12: `null()` is not supported: trellis parameters cannot be null
        "#]],
        );
        check(
            "shop/Daily/ null ( )",
            expect![[r#"
            shop/Daily/ null ( )
                        ^
            column 13: `null()` is not supported: trellis parameters cannot be null
        "#]],
        );
        check(
            "shop/Daily/i(5)x",
            expect![[r#"
            shop/Daily/i(5)x
                           ^
            column 16: unexpected `x` after `i(..)`; a segment holds exactly one form
        "#]],
        );
        check(
            "shop/Daily/i()",
            expect![[r#"
            shop/Daily/i()
                       ^
            column 12: `i()` needs a value, e.g. i(42)
        "#]],
        );
        check(
            "shop/ei(A,B)",
            expect![[r#"
            shop/ei(A,B)
                 ^
            column 6: the view type must be a name or an enumeration e(A,B); `ei(..)` is not allowed here
        "#]],
        );
        check(
            "shop/Dä(ly/1",
            expect![[r#"
            shop/Dä(ly/1
                   ^
            column 8: unbalanced parentheses: this `(` of `Dä(..)` is never closed (write \( for a literal parenthesis)
        "#]],
        );
    }

    #[test]
    fn parenthesis_errors() {
        check(
            "shop/Daily/i(5",
            expect![[r#"
            shop/Daily/i(5
                        ^
            column 13: unbalanced parentheses: this `(` of `i(..)` is never closed (write \( for a literal parenthesis)
        "#]],
        );
        check(
            "shop/Daily/i(5))",
            expect![[r#"
            shop/Daily/i(5))
                           ^
            column 16: unbalanced parentheses: `)` has no matching `(` (write \) for a literal parenthesis)
        "#]],
        );
        check(
            "shop/Daily/a)b",
            expect![[r#"
            shop/Daily/a)b
                        ^
            column 13: unbalanced parentheses: `)` has no matching `(` (write \) for a literal parenthesis)
        "#]],
        );
        check(
            "shop/Daily/e(a,(b))",
            expect![[r#"
            shop/Daily/e(a,(b))
                           ^
            column 16: forms cannot be nested inside `e(..)`; use a typed enumeration such as ei(1,2) instead of e(i(1),i(2)), or write \( for a literal parenthesis
        "#]],
        );
        check(
            "shop/Daily/e(i(1),i(2))",
            expect![[r#"
            shop/Daily/e(i(1),i(2))
                          ^
            column 15: forms cannot be nested inside `e(..)`; use a typed enumeration such as ei(1,2) instead of e(i(1),i(2)), or write \( for a literal parenthesis
        "#]],
        );
        check(
            "shop/Daily/e(a/b)",
            expect![[r#"
            shop/Daily/e(a/b)
                        ^
            column 13: unbalanced parentheses: this `(` of `e(..)` is never closed (write \( for a literal parenthesis)
        "#]],
        );
    }

    #[test]
    fn value_errors() {
        check(
            "shop.datamart/DailySales/*/2015/05/01",
            expect![[r#"
                shop.datamart/DailySales/*/2015/05/01
                                         ^
                column 26: `*` is not a wildcard in a view pattern; name the values with e(SHOP10,SHOP20) or a range such as rymd(20150501-20150531) (see docs/view-patterns.md)
            "#]],
        );
        check(
            "p/V/i(abc)",
            expect![[r#"
            p/V/i(abc)
                  ^
            column 7: `i(..)` expects an integer such as i(42), got `abc`
        "#]],
        );
        check(
            "p/V/i(2147483648)",
            expect![[r#"
            p/V/i(2147483648)
                  ^
            column 7: `2147483648` is out of range for `i(..)`, which is a 32-bit integer (-2147483648..=2147483647)
        "#]],
        );
        check(
            "p/V/b(128)",
            expect![[r#"
            p/V/b(128)
                  ^
            column 7: `128` is out of range for `b(..)`, which is a byte (-128..=127)
        "#]],
        );
        check(
            "p/V/l(99999999999999999999)",
            expect![[r#"
            p/V/l(99999999999999999999)
                  ^
            column 7: `99999999999999999999` is out of range for `l(..)`, which is a 64-bit integer (-9223372036854775808..=9223372036854775807)
        "#]],
        );
        check(
            "p/V/i(-)",
            expect![[r#"
            p/V/i(-)
                  ^
            column 7: `i(..)` expects an integer such as i(42), got `-`
        "#]],
        );
        check(
            "p/V/t(yes)",
            expect![[r#"
            p/V/t(yes)
                  ^
            column 7: `t(..)` expects true or false, got `yes`
        "#]],
        );
        check(
            "p/V/t(TRUE)",
            expect![[r#"
            p/V/t(TRUE)
                  ^
            column 7: `t(..)` expects true or false, got `TRUE`
        "#]],
        );
        check(
            "p/V/f(5.)",
            expect![[r#"
            p/V/f(5.)
                  ^
            column 7: `f(..)` expects a decimal number such as 5.23 or -1e10, got `5.`
        "#]],
        );
        check(
            "p/V/d(1e)",
            expect![[r#"
            p/V/d(1e)
                  ^
            column 7: `d(..)` expects a decimal number such as 5.23 or -1e10, got `1e`
        "#]],
        );
        check(
            "p/V/d()",
            expect![[r#"
            p/V/d()
                ^
            column 5: `d()` needs a value, e.g. d(5.23)
        "#]],
        );
        check(
            "p/V/ei(1,x)",
            expect![[r#"
            p/V/ei(1,x)
                     ^
            column 10: `i(..)` expects an integer such as i(42), got `x`
        "#]],
        );
    }

    #[test]
    fn date_errors() {
        check(
            "p/V/rym(2015-13)",
            expect![[r#"
            p/V/rym(2015-13)
                    ^
            column 9: `rym(..)` expects a month as yyyyMM, e.g. 201505; got `2015`
        "#]],
        );
        check(
            "p/V/rym(201513-201501)",
            expect![[r#"
            p/V/rym(201513-201501)
                        ^
            column 13: month 13 does not exist (in `201513`)
        "#]],
        );
        check(
            "p/V/rym(201501)",
            expect![[r#"
            p/V/rym(201501)
                    ^
            column 9: `rym(..)` needs two months joined by `-`, e.g. rym(201505-201410)
        "#]],
        );
        check(
            "p/V/rym(201501-201502-201503)",
            expect![[r#"
            p/V/rym(201501-201502-201503)
                                 ^
            column 22: `rym(..)` takes exactly two months joined by one `-`
        "#]],
        );
        check(
            "p/V/rymd(20150501-)",
            expect![[r#"
            p/V/rymd(20150501-)
                             ^
            column 18: `rymd(..)` is missing the day after `-`, e.g. rymd(20150501-20150531)
        "#]],
        );
        check(
            "p/V/rymd(-20150501)",
            expect![[r#"
            p/V/rymd(-20150501)
                     ^
            column 10: `rymd(..)` is missing the day before `-`, e.g. rymd(20150501-20150531)
        "#]],
        );
        check(
            "p/V/ymd(20150230)",
            expect![[r#"
            p/V/ymd(20150230)
                          ^
            column 15: day 30 does not exist (in `20150230`): February 2015 has 28 days
        "#]],
        );
        check(
            "p/V/ymd(20150431)",
            expect![[r#"
            p/V/ymd(20150431)
                          ^
            column 15: day 31 does not exist (in `20150431`): April 2015 has 30 days
        "#]],
        );
        check(
            "p/V/ymd(20150001)",
            expect![[r#"
            p/V/ymd(20150001)
                        ^
            column 13: month 00 does not exist (in `20150001`)
        "#]],
        );
        check(
            "p/V/ym(2015-05)",
            expect![[r#"
            p/V/ym(2015-05)
                   ^
            column 8: `ym(..)` expects a month as yyyyMM, e.g. 201505; got `2015-05`
        "#]],
        );
        check(
            "p/V/ym(２０１５０５)",
            expect![[r#"
            p/V/ym(２０１５０５)
                   ^
            column 8: `ym(..)` expects a month as yyyyMM, e.g. 201505; got `２０１５０５`
        "#]],
        );
        check(
            "p/V/erym(201401-201402,201413-201401)",
            expect![[r#"
            p/V/erym(201401-201402,201413-201401)
                                       ^
            column 28: month 13 does not exist (in `201413`)
        "#]],
        );
        check(
            "p/V/rymd(00000101-99991231)",
            expect![[r#"
            p/V/rymd(00000101-99991231)
                     ^
            column 10: this segment expands to at least 3652425 alternatives; at most 100000 are allowed per segment (split the range into several patterns)
        "#]],
        );
        check(
            "p/V/erym(000001-499912,500001-999912)",
            expect![[r#"
            p/V/erym(000001-499912,500001-999912)
                                   ^
            column 24: this segment expands to at least 120000 alternatives; at most 100000 are allowed per segment (split the range into several patterns)
        "#]],
        );
    }

    #[test]
    fn enumeration_errors() {
        check(
            "p/V/e()",
            expect![[r#"
            p/V/e()
                ^
            column 5: empty enumeration `e()`; list at least one value, e.g. e(a,b)
        "#]],
        );
        check(
            "p/V/eymd( )",
            expect![[r#"
            p/V/eymd( )
                ^
            column 5: empty enumeration `eymd()`; list at least one value, e.g. eymd(20150501)
        "#]],
        );
        check(
            "p/e()",
            expect![[r#"
            p/e()
              ^
            column 3: empty enumeration `e()`; list at least one value, e.g. e(a,b)
        "#]],
        );
        check(
            "p/V/e(a,,b)",
            expect![[r#"
            p/V/e(a,,b)
                    ^
            column 9: empty value in `e(..)`; remove the extra `,` (write \, for a literal comma)
        "#]],
        );
        check(
            "p/V/e(a,)",
            expect![[r#"
            p/V/e(a,)
                    ^
            column 9: empty value in `e(..)`; remove the extra `,` (write \, for a literal comma)
        "#]],
        );
        check(
            "p/V/e(,a)",
            expect![[r#"
            p/V/e(,a)
                  ^
            column 7: empty value in `e(..)`; remove the extra `,` (write \, for a literal comma)
        "#]],
        );
        check(
            "p/e(A, ,B)",
            expect![[r#"
            p/e(A, ,B)
                   ^
            column 8: empty value in `e(..)`; remove the extra `,` (write \, for a literal comma)
        "#]],
        );
    }

    #[test]
    fn escape_and_decoding_errors() {
        check(
            r"p/V/a\x",
            expect![[r#"
            p/V/a\x
                 ^
            column 6: `\x` is not an escape; only \\ \, \( \) \- are (a `/` must be written %2F)
        "#]],
        );
        check(
            r"p/V/a\",
            expect![[r#"
            p/V/a\
                 ^
            column 6: a backslash at the end of a segment escapes nothing; write \\ for a literal backslash (a `/` must be written %2F)
        "#]],
        );
        check(
            r"p/V/a\/b",
            expect![[r#"
            p/V/a\/b
                 ^
            column 6: a backslash at the end of a segment escapes nothing; write \\ for a literal backslash (a `/` must be written %2F)
        "#]],
        );
        check(
            "p/V/%zz",
            expect![[r#"
            p/V/%zz
                ^
            column 5: `%` must start a percent-escape of two hex digits such as %2F (write %25 for a literal `%`)
        "#]],
        );
        check(
            "p/V/50%",
            expect![[r#"
            p/V/50%
                  ^
            column 7: `%` must start a percent-escape of two hex digits such as %2F (write %25 for a literal `%`)
        "#]],
        );
        check(
            "p/V/%C3",
            expect![[r#"
            p/V/%C3
                ^
            column 5: percent-escapes do not decode to valid UTF-8
        "#]],
        );
        check(
            "p/V/a%00b",
            expect![[r#"
            p/V/a%00b
                 ^
            column 6: control character U+0000 is not allowed
        "#]],
        );
        check(
            "p/V/a\tb",
            expect![[r#"
            p/V/a?b
                 ^
            column 6: control character U+0009 is not allowed
        "#]],
        );
        check(
            "p/Vä/x\u{0}",
            expect![[r#"
            p/Vä/x?
                  ^
            column 7: control character U+0000 is not allowed
        "#]],
        );
    }

    #[test]
    fn error_display_is_one_line() {
        let error = parse("shop/Daily/x(1)").unwrap_err();
        expect![[r#"invalid view pattern at column 12: unknown form `x(..)`; known forms are i, l, b, t, f, d, ym, ymd, rym, rymd, e, ei, el, eb, et, ef, ed, eym, eymd, erym, erymd (write \( for a literal parenthesis) (a pattern is package/ViewType[/parameter...], e.g. shop.datamart/DailySales/SHOP10/rymd(20150501-20150531); see docs/view-patterns.md)"#]].assert_eq(&error.to_string());
    }

    #[test]
    fn count_saturates_and_product_is_lazy() {
        let segment = Segment { alternatives: (0..100_000).map(|i| vec![i.to_string()]).collect(), column: 1 };
        let pattern = Pattern { package: "p".into(), view_types: vec!["V".into()], segments: vec![segment; 4] };
        assert_eq!(pattern.count(), usize::MAX);
        let first: Vec<Vec<String>> = pattern.parameter_lists().take(2).collect();
        assert_eq!(first, [["0", "0", "0", "0"], ["0", "0", "0", "1"]]);

        let empty = Pattern { segments: vec![Segment { alternatives: vec![], column: 5 }], ..pattern };
        assert_eq!(empty.count(), 0);
        assert_eq!(empty.parameter_lists().count(), 0);
    }

    #[test]
    fn segment_columns_point_into_the_original_text() {
        let pattern = parse("/pä/V/%41/e(a,b)/").unwrap();
        let columns: Vec<usize> = pattern.segments.iter().map(|s| s.column).collect();
        assert_eq!(columns, [7, 11]);
    }

    #[test]
    fn fully_percent_encoded_segments_parse_the_same() {
        use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
        for text in [
            "shop.datamart/e(DailySales,MonthlySales)/e(SHOP10,SHOP20)/rym(201505-201410)",
            r"p/V/e(a\,b, c\-d)/Zürich/ymd(20160229)/erymd(20151231-20160101)/f(-1.5e3)",
        ] {
            let encoded: Vec<String> =
                text.split('/').map(|segment| utf8_percent_encode(segment, NON_ALPHANUMERIC).to_string()).collect();
            let (plain, encoded) = (parse(text).unwrap(), parse(&encoded.join("/")).unwrap());
            assert_eq!((&plain.package, &plain.view_types), (&encoded.package, &encoded.view_types));
            assert!(plain.parameter_lists().eq(encoded.parameter_lists()), "{text}");
        }
    }

    #[test]
    fn never_panics_on_odd_input() {
        let valid = [
            "shop.datamart/e(DailySales,MonthlySales)/e(SHOP10,SHOP20)/rym(201505-201410)",
            "/shop.raw/Orders/SHOP10/rymd(20150501-20141015)/",
            r"p/V/i(007)/l(1)/b(2)/t(true)/f(.5)/d(1e3)/ym(201505)/ymd(20160229)/null\(\)/%C3%BC",
            "p/V/ei(1,2)/el(3)/eb(4)/et(false)/ef(1.5)/ed(2)/eym(201501)/eymd(20150101)/erym(201501-201502)",
            "p/V/erymd(20150101-20150102, 20150105-20150103)/e( a , b )",
        ];
        let odd = [
            "((((",
            "))))",
            "\\",
            "\\\\",
            "e(",
            "p/V/e(",
            "p/V/rymd(20150501-)",
            "p/V/rymd(-)",
            "p/V/rym(-)",
            "p/V/erym(-,-)",
            "p/V/e(,)",
            "p/V/i(",
            "p/V/()",
            "p/V/)(",
            "p/V/%",
            "p/V/%F",
            "p/V/%FF%FE",
            "p/V/%E2%82",
            "\0",
            "p/V/\0",
            "ü/ß/😀(1)",
            "😀/😀/e(😀,😀)",
            "p/V/ym(😀😀😀😀😀😀)",
            "p/V/ymd(2015０501)",
            "////",
            "/ / /",
            "p/V/i(99999999999999999999999999999999999)",
            "p/V/f(--1)",
            "p/V/e(\\)",
            "p/V/ \u{2003}i(1)\u{2003}",
            "p/V/\u{202e}x",
            "p/V/rymd(99991231-99991231)",
            "p/V/rymd(00000228-00000301)",
        ];
        let mut inputs: Vec<String> = odd.iter().map(|s| s.to_string()).collect();
        for text in valid {
            let chars: Vec<char> = text.chars().collect();
            for i in 0..=chars.len() {
                inputs.push(chars[..i].iter().collect());
                inputs.push(chars[i..].iter().collect());
            }
        }
        for input in &inputs {
            match parse(input) {
                Ok(pattern) => {
                    let _ = pattern.count();
                    let _ = pattern.parameter_lists().take(3).count();
                }
                Err(e) => {
                    let columns = input.chars().count() + 1;
                    assert!((1..=columns).contains(&e.column), "column {} out of range for {input:?}", e.column);
                    let line = e.to_string();
                    assert!(!line.contains('\n') && !e.message.is_empty(), "{line}");
                }
            }
        }
        for text in valid {
            assert!(parse(text).is_ok(), "{text}");
        }
    }
}
