//! Configuration values with Oozie's functions, resolved by the host before
//! a plugin sees its configuration: `${shop}`, `${dataIn('orders')}`,
//! `${dataOut()}`, `${nominalTime()}`, `${actualTime()}`,
//! `${dateOffset(nominalTime(), -1, 'DAY')}` and
//! `${formatTime(nominalTime(), 'yyyy-MM-dd')}`. The `coord:` prefix of
//! Oozie is accepted and ignored; text is quoted with `'` or `"`.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::template::{LoneDollar, Segment, segments};
use super::time::{OffsetUnit, date_offset, format_time};

/// A parsed configuration value: literal text and `${...}` expressions.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigValue {
    parts: Vec<Part>,
    /// The text as written, which is what version checksums hash.
    source: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Expression(Expression),
}

#[derive(Debug, Clone, PartialEq)]
enum Expression {
    Parameter(String),
    Text(String),
    Number(i64),
    Call(Function, Vec<Expression>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Function {
    DataIn,
    DataOut,
    NominalTime,
    ActualTime,
    DateOffset,
    FormatTime,
}

const FUNCTIONS: [(&str, Function, usize); 6] = [
    ("dataIn", Function::DataIn, 1),
    ("dataOut", Function::DataOut, 0),
    ("nominalTime", Function::NominalTime, 0),
    ("actualTime", Function::ActualTime, 0),
    ("dateOffset", Function::DateOffset, 3),
    ("formatTime", Function::FormatTime, 2),
];

/// What resolving a value needs to know about the view.
pub struct Context<'a> {
    pub parameter: &'a dyn Fn(&str) -> Option<String>,
    /// The data paths of a dependency, by name, already joined with commas.
    pub data_in: &'a dyn Fn(&str) -> Option<String>,
    pub data_out: String,
    pub nominal_time: Option<DateTime<Utc>>,
    pub actual_time: DateTime<Utc>,
    pub timezone: Tz,
}

/// A value while evaluating: text, or a time that functions can still use.
enum Value {
    Text(String),
    Time(DateTime<Utc>),
    Number(i64),
}

impl Value {
    fn render(self) -> String {
        match self {
            Value::Text(text) => text,
            // Oozie's format for times in EL: UTC, minutes.
            Value::Time(time) => time.format("%Y-%m-%dT%H:%MZ").to_string(),
            Value::Number(n) => n.to_string(),
        }
    }
}

impl ConfigValue {
    pub fn parse(text: &str) -> Result<ConfigValue, String> {
        let mut parts = Vec::new();
        for segment in segments(text, LoneDollar::Literal, closing_brace)? {
            parts.push(match segment {
                Segment::Literal(literal) => Part::Literal(literal),
                Segment::Placeholder(body) => {
                    let mut parser = Parser { text: body, at: 0, depth: 0 };
                    let expression = parser.expression()?;
                    parser.skip_space();
                    if parser.at != parser.text.len() {
                        return Err(format!("unexpected `{}` in `${{{body}}}`", &parser.text[parser.at..]));
                    }
                    Part::Expression(expression)
                }
            });
        }
        Ok(ConfigValue { parts, source: text.to_string() })
    }

    /// The value as written in the project file.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Checks names against the view type: parameters and dependency names.
    pub fn check(&self, parameters: &[&str], dependencies: &[&str], timed: bool) -> Result<(), String> {
        fn walk(e: &Expression, parameters: &[&str], dependencies: &[&str], timed: bool) -> Result<(), String> {
            match e {
                Expression::Parameter(name) if !parameters.contains(&name.as_str()) => {
                    Err(format!("`{name}` is not a parameter (parameters: {})", super::names_or_none(parameters)))
                }
                Expression::Call(Function::DataIn, args) => match args.as_slice() {
                    [Expression::Text(name)] if !dependencies.contains(&name.as_str()) => Err(format!(
                        "dataIn('{name}'): no dependency is named `{name}` (dependencies: {})",
                        super::names_or_none(dependencies)
                    )),
                    [Expression::Text(_)] => Ok(()),
                    _ => Err("dataIn takes a dependency name in quotes, e.g. dataIn('orders')".into()),
                },
                Expression::Call(Function::NominalTime, _) if !timed => {
                    Err("nominalTime() needs a view type with a time dimension".into())
                }
                // A pattern or unit written in quotes is known now: a mistake in it is the project's,
                // reported by `validate` rather than by the first run.
                Expression::Call(Function::DateOffset, args) => {
                    args.iter().try_for_each(|a| walk(a, parameters, dependencies, timed))?;
                    match args.as_slice() {
                        [_, _, Expression::Text(unit)] => {
                            unit.parse::<OffsetUnit>().map(drop).map_err(|e| format!("dateOffset: {e}"))
                        }
                        _ => Ok(()),
                    }
                }
                Expression::Call(Function::FormatTime, args) => {
                    args.iter().try_for_each(|a| walk(a, parameters, dependencies, timed))?;
                    match args.as_slice() {
                        // Whether a pattern is good does not depend on the time it formats.
                        [_, Expression::Text(pattern)] => format_time(DateTime::UNIX_EPOCH, pattern, Tz::UTC)
                            .map(drop)
                            .map_err(|e| format!("formatTime: {e}")),
                        _ => Ok(()),
                    }
                }
                Expression::Call(_, args) => args.iter().try_for_each(|a| walk(a, parameters, dependencies, timed)),
                _ => Ok(()),
            }
        }
        self.parts.iter().try_for_each(|part| match part {
            Part::Expression(e) => walk(e, parameters, dependencies, timed),
            Part::Literal(_) => Ok(()),
        })
    }

    pub fn resolve(&self, context: &Context<'_>) -> Result<String, String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Expression(e) => out.push_str(&evaluate(e, context)?.render()),
            }
        }
        Ok(out)
    }
}

/// The `}` that closes `${`, skipping braces inside quotes.
fn closing_brace(body: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in body.char_indices() {
        match (c, quote) {
            ('\'' | '"', None) => quote = Some(c),
            (_, Some(open)) if c == open => quote = None,
            ('}', None) => return Some(i),
            _ => {}
        }
    }
    None
}

fn evaluate(e: &Expression, context: &Context<'_>) -> Result<Value, String> {
    let time = |e: &Expression| match evaluate(e, context)? {
        Value::Time(time) => Ok(time),
        Value::Text(text) => super::time::parse_timestamp(&text, Tz::UTC)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|err| format!("`{text}` is not a time: {err}")),
        Value::Number(n) => Err(format!("{n} is not a time")),
    };
    Ok(match e {
        Expression::Parameter(name) => {
            Value::Text((context.parameter)(name).ok_or_else(|| format!("no parameter `{name}`"))?)
        }
        Expression::Text(text) => Value::Text(text.clone()),
        Expression::Number(n) => Value::Number(*n),
        Expression::Call(function, args) => match (function, args.as_slice()) {
            (Function::DataIn, [Expression::Text(name)]) => {
                Value::Text((context.data_in)(name).ok_or_else(|| format!("no dependency named `{name}`"))?)
            }
            (Function::DataOut, []) => Value::Text(context.data_out.clone()),
            (Function::NominalTime, []) => {
                Value::Time(context.nominal_time.ok_or("nominalTime(): the view has no time dimension")?)
            }
            (Function::ActualTime, []) => Value::Time(context.actual_time),
            (Function::DateOffset, [base, n, unit]) => {
                let base = time(base)?;
                let Value::Number(n) = evaluate(n, context)? else {
                    return Err("dateOffset: n must be a number".into());
                };
                let unit = match evaluate(unit, context)?.render().parse::<OffsetUnit>() {
                    Ok(unit) => unit,
                    Err(e) => return Err(format!("dateOffset: {e}")),
                };
                Value::Time(date_offset(base, n, unit).map_err(|e| e.to_string())?)
            }
            (Function::FormatTime, [base, pattern]) => {
                let base = time(base)?;
                let pattern = evaluate(pattern, context)?.render();
                Value::Text(format_time(base, &pattern, context.timezone).map_err(|e| e.to_string())?)
            }
            _ => return Err("wrong arguments".into()),
        },
    })
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

/// How deeply calls may nest: enough for any real value, few enough that
/// evaluation cannot exhaust the stack.
const NESTING_LIMIT: usize = 16;

impl Parser<'_> {
    fn skip_space(&mut self) {
        while let Some(c) = self.text[self.at..].chars().next().filter(|c| c.is_whitespace()) {
            self.at += c.len_utf8();
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.text[self.at..].starts_with(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expression(&mut self) -> Result<Expression, String> {
        self.skip_space();
        let rest = &self.text[self.at..];
        // Text in either quote, as in Oozie's EL: `"yyyy-MM-dd'T'HH"` holds SimpleDateFormat's quotes.
        if let Some(quote) = rest.chars().next().filter(|&c| c == '\'' || c == '"') {
            let quoted = &rest[1..];
            let end = quoted.find(quote).ok_or_else(|| format!("unclosed quote in `{}`", self.text))?;
            self.at += end + 2;
            return Ok(Expression::Text(quoted[..end].to_string()));
        }
        let number_end = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
            .map_or(rest.len(), |(i, _)| i);
        if number_end > 0 && rest[..number_end].chars().any(|c| c.is_ascii_digit()) {
            self.at += number_end;
            return rest[..number_end].parse().map(Expression::Number).map_err(|e| e.to_string());
        }
        let name_end = rest
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == ':'))
            .map_or(rest.len(), |(i, _)| i);
        let name = rest[..name_end].strip_prefix("coord:").unwrap_or(&rest[..name_end]);
        if name.is_empty() {
            return Err(format!("expected a name, a 'text', a number or a function call in `${{{}}}`", self.text));
        }
        self.at += name_end;
        if !self.eat('(') {
            return Ok(Expression::Parameter(name.to_string()));
        }
        let Some(&(_, function, arity)) = FUNCTIONS.iter().find(|(known, ..)| *known == name) else {
            let known: Vec<&str> = FUNCTIONS.iter().map(|(known, ..)| *known).collect();
            return Err(format!("unknown function `{name}` (functions: {})", known.join(", ")));
        };
        self.depth += 1;
        if self.depth > NESTING_LIMIT {
            return Err(format!("calls nest deeper than {NESTING_LIMIT} in `${{{}}}`", self.text));
        }
        let mut args = Vec::new();
        if !self.eat(')') {
            loop {
                args.push(self.expression()?);
                if self.eat(')') {
                    break;
                }
                if !self.eat(',') {
                    return Err(format!("expected `,` or `)` in `${{{}}}`", self.text));
                }
            }
        }
        self.depth -= 1;
        if args.len() != arity {
            return Err(format!(
                "{name} takes {arity} argument{}, not {}",
                if arity == 1 { "" } else { "s" },
                args.len()
            ));
        }
        Ok(Expression::Call(function, args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn resolve(text: &str) -> Result<String, String> {
        let parameter = |name: &str| (name == "shop").then(|| "SHOP10".to_string());
        let data_in = |name: &str| (name == "orders").then(|| "/d/o/1,/d/o/2".to_string());
        let context = Context {
            parameter: &parameter,
            data_in: &data_in,
            data_out: "/d/out".into(),
            nominal_time: Some(Utc.with_ymd_and_hms(2015, 5, 1, 0, 0, 0).unwrap()),
            actual_time: Utc.with_ymd_and_hms(2015, 5, 2, 3, 4, 0).unwrap(),
            timezone: Tz::UTC,
        };
        let value = ConfigValue::parse(text)?;
        value.check(&["shop"], &["orders"], true)?;
        value.resolve(&context)
    }

    #[test]
    fn functions_resolve_with_oozie_meanings() {
        let cases = [
            ("plain", "plain"),
            ("${shop}-$${x}", "SHOP10-${x}"),
            ("${dataIn('orders')}", "/d/o/1,/d/o/2"),
            ("${coord:dataOut()}", "/d/out"),
            ("${nominalTime()}", "2015-05-01T00:00Z"),
            ("${actualTime()}", "2015-05-02T03:04Z"),
            ("${dateOffset(nominalTime(), -1, 'DAY')}", "2015-04-30T00:00Z"),
            ("${dateOffset(nominalTime(), -2, 'YEAR')}", "2013-05-01T00:00Z"),
            ("${formatTime(dateOffset(nominalTime(), 1, 'MONTH'), 'yyyy/MM')}", "2015/06"),
            ("day=${formatTime(nominalTime(), 'yyyyMMdd')}/x", "day=20150501/x"),
            (r#"${formatTime(nominalTime(), "EEE yyyy-MM-dd'T'hh a")}"#, "Fri 2015-05-01T12 AM"),
            // Any Unicode whitespace around tokens, including a no-break space.
            ("${\u{a0}nominalTime(\u{a0})\u{a0}}", "2015-05-01T00:00Z"),
        ];
        for (text, expected) in cases {
            assert_eq!(resolve(text).as_deref(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("${dataIn('order')}", "dataIn('order'): no dependency is named `order` (dependencies: orders)"),
            ("${shopp}", "`shopp` is not a parameter (parameters: shop)"),
            (
                "${nominaltime()}",
                "unknown function `nominaltime` (functions: dataIn, dataOut, nominalTime, actualTime, dateOffset, formatTime)",
            ),
            ("${dateOffset(nominalTime(), 1)}", "dateOffset takes 3 arguments, not 2"),
            (
                "${dateOffset(nominalTime(), 1, 'day')}",
                "dateOffset: invalid time unit `day`: expected MINUTE, HOUR, DAY, WEEK, MONTH or YEAR",
            ),
            ("${dataIn('orders'}", "expected `,` or `)` in `${dataIn('orders'}`"),
            ("${shop", "unclosed `${` in `${shop`"),
            (
                "${formatTime(nominalTime(), 'yyyy-MM-dd HH:mm:ss.SSS Y')}",
                "formatTime: invalid time pattern `yyyy-MM-dd HH:mm:ss.SSS Y`: unsupported field `Y` at position 24 \
                 (supported: G y M d D E u a H k K h m s S w W F z Z X, 'literal')",
            ),
            (
                "${formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(nominalTime(), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y')}",
                "calls nest deeper than 16 in `${formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(formatTime(nominalTime(), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y'), 'y')}`",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(resolve(text), Err(expected.to_string()), "{text}");
        }
    }
}
