//! One `[[view.dependency]]` into a `Dependency`: its target, a binding for
//! each of the target's parameters, and which time instances it selects,
//! with the limits that keep one view's dependencies countable.

use std::collections::{BTreeMap, HashMap};

use toml::Spanned;

use super::Checker;
use super::checksum::kind_name;
use super::raw::{RawBinding, RawDependency, RawViewType};
use crate::catalog::template::Template;
use crate::catalog::time::{self, Dataset, Frequency, OffsetUnit};
use crate::catalog::{
    Binding, Dependency, Parameter, ParameterKind, TimeSelection, ViewTypeId, canonical_value, closest, names_or_none,
};

/// How far `current(n)` and `latest(n)` may reach, and how wide a range
/// may be: a minute dataset over ten years is five million instances.
const OFFSET_LIMIT: i64 = 10_000_000;
const RANGE_LIMIT: i64 = 100_000;

/// Most dependency views one declaration may give a view through its
/// enumerations, and most declarations a view type may have.
const FAN_OUT_LIMIT: usize = 100_000;
pub(super) const DEPENDENCY_LIMIT: usize = 1_000;

/// One dependency being checked: who depends on which target, and where.
#[derive(Clone, Copy)]
struct Edge<'a> {
    /// The dependent view type.
    name: &'a str,
    target_name: &'a str,
    target_raw: &'a RawViewType,
    /// `{name}: dependency on {target_name}`, which starts each message.
    context: &'a str,
    /// Where the dependency's `view` is declared.
    at: usize,
}

impl Checker<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dependency(
        &mut self,
        name: &str,
        raw: &Spanned<RawDependency>,
        parameters: &[Parameter],
        time: Option<&Dataset>,
        own_time_invalid: bool,
        by_name: &HashMap<String, ViewTypeId>,
        all: &[Spanned<RawViewType>],
    ) -> Option<Dependency> {
        let d = raw.get_ref();
        let at = d.view.span().start;
        let target_name = d.view.get_ref();
        let Some(&target) = by_name.get(target_name) else {
            let hint = closest(target_name, all.iter().map(|v| v.get_ref().name.get_ref().as_str()));
            let hint = if hint.is_empty() { String::new() } else { format!("; did you mean {}?", hint.join(" or ")) };
            self.error(at, format!("{name} depends on {target_name}, which is not declared{hint}"));
            return None;
        };
        let target_raw = all[target.0 as usize].get_ref();
        let errors_before = self.diagnostics.len();
        let context = format!("{name}: dependency on {target_name}");
        let edge = Edge { name, target_name, target_raw, context: &context, at };
        let bindings = self.bindings(edge, d, parameters)?;
        let time = self.time_selection(edge, d, time, own_time_invalid)?;
        if self.diagnostics.len() > errors_before {
            return None;
        }
        let short = target_name.rsplit('/').next().unwrap_or(target_name);
        let default_name: String =
            short.chars().take(1).flat_map(char::to_lowercase).chain(short.chars().skip(1)).collect();
        Some(Dependency {
            name: d.name.clone().unwrap_or(default_name),
            target,
            parameters: bindings,
            time,
            incremental: false,
            line: self.lines.line(raw.span().start),
        })
    }

    /// A binding for each of the target's parameters: explicitly, or from
    /// the dependent's parameter of the same name and kind; at most
    /// `FAN_OUT_LIMIT` dependency views per view through the enumerations.
    fn bindings(&mut self, edge: Edge<'_>, d: &RawDependency, parameters: &[Parameter]) -> Option<Vec<Binding>> {
        let Edge { name, target_name, target_raw, context, at } = edge;
        // Every parameter of the target gets values: explicitly, or from
        // the dependent's parameter of the same name and kind.
        let bindings_at = d.parameters.as_ref().map_or(at, |p| p.span().start);
        let raw_bindings: BTreeMap<&str, Option<RawBinding>> = d
            .parameters
            .iter()
            .flat_map(|p| p.get_ref().iter())
            .map(|(key, value)| (key.as_str(), RawBinding::from_value(value)))
            .collect();
        let target_parameters: Vec<(&str, ParameterKind)> =
            target_raw.parameters.iter().map(|p| (p.get_ref().name.as_str(), p.get_ref().kind)).collect();
        for (key, binding) in &raw_bindings {
            if !target_parameters.iter().any(|(name, _)| name == key) {
                let known: Vec<&str> = target_parameters.iter().map(|(name, _)| *name).collect();
                let known = names_or_none(&known);
                self.error(
                    bindings_at,
                    format!("{context}: {target_name} has no parameter `{key}` (its parameters: {known})"),
                );
            } else if binding.is_none() {
                self.error(bindings_at, format!("{context}: `{key}` must be a string or a list of strings"));
            }
        }
        let mut bindings = Vec::new();
        let mut fan_out: usize = 1;
        for &(target_parameter, kind) in &target_parameters {
            let (texts, each): (Vec<&String>, bool) = match raw_bindings.get(target_parameter) {
                Some(Some(RawBinding::One(text))) => (vec![text], false),
                Some(Some(RawBinding::Each(values))) if values.is_empty() => {
                    self.error(bindings_at, format!("{context}: `{target_parameter}` enumerates no values"));
                    continue;
                }
                Some(Some(RawBinding::Each(values))) => (values.iter().collect(), true),
                Some(None) => continue,
                None => match parameters.iter().find(|p| p.name == target_parameter) {
                    Some(own) if own.kind == kind => {
                        bindings.push(Binding::One(Template::parse(&format!("${{{target_parameter}}}")).ok()?));
                        continue;
                    }
                    Some(own) => {
                        self.error(at, format!("{context}: `{target_parameter}` is {} in {name} but {} in {target_name}; bind it explicitly", kind_name(own.kind), kind_name(kind)));
                        continue;
                    }
                    None => {
                        self.error(
                        at,
                        format!("{context}: parameter `{target_parameter}` of {target_name} has no value; bind it with parameters = {{ {target_parameter} = ... }}"),
                    );
                        continue;
                    }
                },
            };
            fan_out = fan_out.saturating_mul(texts.len());
            let mut templates = self.binding_templates(edge, target_parameter, kind, &texts, parameters, bindings_at);
            bindings.push(if each { Binding::Each(templates) } else { Binding::One(templates.pop()?) });
        }
        if fan_out > FAN_OUT_LIMIT {
            self.error(
                bindings_at,
                format!(
                    "{context}: the enumerations give {fan_out} dependency views per view, more than {FAN_OUT_LIMIT}"
                ),
            );
        }
        Some(bindings)
    }

    /// The templates a parameter is bound to: each refers only to the
    /// dependent's parameters, and each literal is a value of the target's
    /// parameter, listed once.
    fn binding_templates(
        &mut self,
        edge: Edge<'_>,
        target_parameter: &str,
        kind: ParameterKind,
        texts: &[&String],
        parameters: &[Parameter],
        bindings_at: usize,
    ) -> Vec<Template> {
        let Edge { name, target_raw, context, .. } = edge;
        // The target's declared values, against which a literal is checked.
        let declared_values = |parameter: &str| {
            let declared = target_raw.parameters.iter().map(|p| p.get_ref()).find(|p| p.name == parameter)?;
            crate::catalog::Values::declared(declared.kind, declared.values.as_ref()?).ok()
        };
        let mut templates: Vec<Template> = Vec::new();
        let mut literals = std::collections::HashSet::new();
        for text in texts {
            match Template::parse(text) {
                Ok(template) => {
                    for variable in template.variables() {
                        if !parameters.iter().any(|p| p.name == variable) {
                            self.error(
                                bindings_at,
                                format!("{context}: `${{{variable}}}` is not a parameter of {name}"),
                            );
                        }
                    }
                    // A literal is checked now, not when the first view
                    // using it is instantiated.
                    if let Some(literal) = template.as_literal() {
                        match canonical_value(kind, literal) {
                            Ok(value) if !literals.insert(value.clone()) => {
                                self.error(
                                    bindings_at,
                                    format!("{context}: `{target_parameter}` lists `{value}` twice"),
                                );
                            }
                            Ok(value) => {
                                if let Some(Err(reason)) = declared_values(target_parameter).map(|v| v.check(&value)) {
                                    self.error(
                                        bindings_at,
                                        format!("{context}: `{target_parameter}` = `{value}`: {reason}"),
                                    );
                                }
                            }
                            Err(reason) => self.error(
                                bindings_at,
                                format!("{context}: `{target_parameter}` = `{}`: {reason}", literal.escape_debug()),
                            ),
                        }
                    }
                    templates.push(template);
                }
                Err(e) => self.error(bindings_at, format!("{context}: {e}")),
            }
        }
        templates
    }

    /// Which of the target's time instances the dependency selects; none
    /// when that is wrong (reported) or cannot be checked.
    fn time_selection(
        &mut self,
        edge: Edge<'_>,
        d: &RawDependency,
        time: Option<&Dataset>,
        own_time_invalid: bool,
    ) -> Option<TimeSelection> {
        let Edge { name, target_name, target_raw, context, at } = edge;
        let time_at = d.time.as_ref().map_or(at, |t| t.span().start);
        let selection = match d.time.as_ref().map(|t| parse_time_selection(t.get_ref())).transpose() {
            Ok(selection) => selection,
            Err(e) => {
                self.error(time_at, format!("{context}: {e}"));
                return None;
            }
        };
        let target_time = target_raw.time.as_ref().map(|t| t.get_ref());
        let target_dataset = target_time.map(|t| Dataset::parse(&t.frequency, &t.initial, t.timezone.as_deref()));
        if own_time_invalid || matches!(target_dataset, Some(Err(_))) {
            // An invalid time is reported where it is declared; what a
            // dependency selects of it cannot be checked, and saying so
            // would only repeat that problem.
            return None;
        }
        let selected = match (target_time, selection) {
            (None, None) => TimeSelection::Timeless,
            (None, Some(_)) => {
                self.error(time_at, format!("{context}: {target_name} has no time dimension; remove `time`"));
                return None;
            }
            (Some(_), None) => self.same_instances(edge, time, target_dataset)?,
            (Some(_), Some(TimeSelection::Latest(n))) => TimeSelection::Latest(n),
            (Some(_), Some(selection)) if time.is_none() => {
                let what = match selection {
                    TimeSelection::All => "all",
                    TimeSelection::Future { .. } => "future()",
                    TimeSelection::Offset { .. } => "offset()",
                    TimeSelection::Absolute { .. } => "absolute()",
                    _ => "current()",
                };
                self.error(time_at, format!("{context}: {what} needs {name} to have a time dimension; use latest(n)"));
                return None;
            }
            (Some(target_time), Some(TimeSelection::All)) => {
                let coarser = target_time
                    .frequency
                    .parse::<Frequency>()
                    .ok()
                    .zip(time.map(Dataset::frequency))
                    .is_some_and(|(target, own)| target.approximate() > own.approximate());
                if coarser {
                    self.error(
                        time_at,
                        format!("{context}: `all` rolls up finer instances, but {target_name} is coarser than {name}"),
                    );
                    return None;
                }
                TimeSelection::All
            }
            (Some(_), Some(TimeSelection::Absolute { from, to })) => {
                // The fixed start must be one of the target's instances, as Oozie requires.
                let theirs = target_dataset.and_then(Result::ok)?;
                self.check_absolute_start(edge, time_at, &theirs, from)?;
                TimeSelection::Absolute { from, to }
            }
            (Some(_), Some(selection)) => selection,
        };
        Some(selected)
    }

    /// A dependency without `time`: instance for instance, which needs the
    /// same frequency, start and zone on both sides.
    fn same_instances(
        &mut self,
        edge: Edge<'_>,
        time: Option<&Dataset>,
        target_dataset: Option<Result<Dataset, time::TimeError>>,
    ) -> Option<TimeSelection> {
        let Edge { name, context, at, .. } = edge;
        match (time, target_dataset) {
            (Some(own), Some(Ok(theirs))) if *own == theirs => Some(TimeSelection::Current { from: 0, to: 0 }),
            (Some(_), _) => {
                self.error(at, format!("{context}: the two time dimensions differ; say which instances with `time` (current(n), current(a)..current(b), latest(n) or all)"));
                None
            }
            (None, _) => {
                self.error(
                    at,
                    format!("{context}: {name} has no time dimension; say which instance with `time = \"latest(n)\"`"),
                );
                None
            }
        }
    }

    /// `absolute(t)` starts at one of the target's instances.
    fn check_absolute_start(
        &mut self,
        edge: Edge<'_>,
        time_at: usize,
        theirs: &Dataset,
        from: chrono::DateTime<chrono::Utc>,
    ) -> Option<()> {
        if theirs.index_at_or_before(from).and_then(|k| theirs.instance(k)) == Some(from) {
            return Some(());
        }
        let Edge { target_name, context, .. } = edge;
        self.error(
            time_at,
            format!(
                "{context}: absolute({}) is not an instance of {target_name} (instances are every {} from {})",
                from.format("%Y-%m-%dT%H:%MZ"),
                theirs.frequency(),
                theirs.initial().format("%Y-%m-%dT%H:%M")
            ),
        );
        None
    }
}

/// What a dependency's `time` may say, for the messages that do not know
/// which call was meant.
const TIME_GUIDE: &str = "time is current(n), current(a)..current(b), latest(n), future(n, limit), offset(n, UNIT), \
                          offset(a, UNIT)..offset(b, UNIT), absolute(t)..current(n) or all";

/// `${coord:current(-1)}` as Oozie writes it is `current(-1)`.
fn bare(text: &str) -> String {
    let text = text.trim();
    let text = text.strip_prefix("${").and_then(|t| t.strip_suffix('}')).unwrap_or(text).trim();
    text.strip_prefix("coord:").unwrap_or(text).to_string()
}

/// The arguments of `function(...)`, if `text` is a call of it.
fn arguments(text: &str, function: &str) -> Option<Vec<String>> {
    let text = bare(text);
    let inner = text.strip_prefix(function)?.trim_start().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|a| a.trim().to_string()).collect())
}

/// A whole number of instances, at most `OFFSET_LIMIT` away.
fn number(argument: &str) -> Result<i64, String> {
    match argument.parse::<i64>() {
        Ok(n) if n.abs() <= OFFSET_LIMIT => Ok(n),
        Ok(_) => Err(format!("`{argument}` is further than {OFFSET_LIMIT} instances away")),
        Err(_) => Err(format!("`{argument}` is not a whole number ({TIME_GUIDE})")),
    }
}

/// The number `function(n)` names, if `text` is a call of it.
fn call(text: &str, function: &str) -> Option<Result<i64, String>> {
    let arguments = arguments(text, function)?;
    Some(match arguments.as_slice() {
        [n] => number(n),
        _ => Err(format!("{function}(n) takes one number")),
    })
}

/// The number and unit of `offset(n, UNIT)`, if `text` is one.
fn offset(text: &str) -> Option<Result<(i64, OffsetUnit), String>> {
    let arguments = arguments(text, "offset")?;
    Some(match arguments.as_slice() {
        [n, unit] => {
            let unit = unit.trim_matches(|c| c == '\'' || c == '"');
            number(n).and_then(|n| Ok((n, unit.parse::<OffsetUnit>().map_err(|e| format!("offset: {e}"))?)))
        }
        _ => Err("offset(n, UNIT) takes a number and a unit, e.g. offset(-60, 'MINUTE')".into()),
    })
}

/// `current(n)`, `current(a)..current(b)`, `latest(n)`, `all`, and Oozie's `future(n, limit)`,
/// `offset(n, unit)` (alone or as a range of two), `absolute(t)..current(n)` and `currentRange(a, b)`. Oozie's `${coord:...}`
/// spelling of each call is accepted.
fn parse_time_selection(text: &str) -> Result<TimeSelection, String> {
    let text = text.trim();
    if text == "all" {
        return Ok(TimeSelection::All);
    }
    if let Some((from, to)) = text.split_once("..") {
        return parse_range(text, from, to);
    }
    if let Some(n) = call(text, "current") {
        let n = n?;
        return Ok(TimeSelection::Current { from: n, to: n });
    }
    // Oozie's `currentRange(a, b)` is `current(a)..current(b)`.
    if let Some(arguments) = arguments(text, "currentRange") {
        let [from, to] = arguments.as_slice() else {
            return Err(format!("`{text}`: currentRange(a, b) takes two numbers, e.g. currentRange(-3, 0)"));
        };
        let (from, to) = (number(from)?, number(to)?);
        return parse_time_selection(&format!("current({from})..current({to})"))
            .map_err(|e| e.replace(&format!("current({from})..current({to})"), text));
    }
    if let Some(n) = call(text, "latest") {
        let n = n?;
        if n > 0 {
            return Err(format!("`{text}`: latest(n) counts back from now, so n is 0 or negative"));
        }
        return Ok(TimeSelection::Latest(n));
    }
    if let Some(arguments) = arguments(text, "future") {
        let [n, limit] = arguments.as_slice() else {
            return Err(format!("`{text}`: future(n, limit) takes two numbers, e.g. future(0, 10)"));
        };
        let (n, limit) = (number(n)?, number(limit)?);
        if n < 0 || limit <= n || limit > RANGE_LIMIT {
            return Err(format!(
                "`{text}`: future(n, limit) finds the n-th (from 0) instance with data within `limit` instances \
                 from current(0): 0 <= n < limit <= {RANGE_LIMIT}"
            ));
        }
        return Ok(TimeSelection::Future { n, limit });
    }
    if let Some(n) = offset(text) {
        let (n, unit) = n?;
        return Ok(TimeSelection::Offset { from: n, to: n, unit });
    }
    Err(format!("`{text}`: {TIME_GUIDE}"))
}

/// `a..b`: two offsets of one unit, `absolute(t)..current(n)`, or two
/// `current`s at most `RANGE_LIMIT` apart; never backwards.
fn parse_range(text: &str, from: &str, to: &str) -> Result<TimeSelection, String> {
    if let Some(from) = offset(from) {
        let (from, unit) = from?;
        let (to, to_unit) =
            offset(to).ok_or_else(|| format!("`{text}`: an offset range ends in offset(n, UNIT)"))??;
        if to_unit != unit {
            return Err(format!("`{text}`: both ends of an offset range take the same unit"));
        }
        if from > to {
            return Err(format!(
                "`{text}`: the range runs backwards; write offset({to}, {unit})..offset({from}, {unit})"
            ));
        }
        return Ok(TimeSelection::Offset { from, to, unit });
    }
    if let Some(arguments) = arguments(from, "absolute") {
        let [instant] = arguments.as_slice() else {
            return Err(format!("`{text}`: absolute takes one time, e.g. absolute('2014-10-06T06:00Z')"));
        };
        let instant = instant.trim_matches(|c| c == '\'' || c == '"');
        let from = time::parse_timestamp(instant, chrono_tz::Tz::UTC)
            .map_err(|e| format!("`{text}`: absolute: {e}"))?
            .with_timezone(&chrono::Utc);
        let to = call(to, "current")
            .ok_or_else(|| format!("`{text}`: absolute(t) starts a range that ends in current(n)"))??;
        return Ok(TimeSelection::Absolute { from, to });
    }
    let from = call(from, "current").ok_or_else(|| format!("`{text}`: {TIME_GUIDE}"))??;
    let to = call(to, "current").ok_or_else(|| format!("`{text}`: {TIME_GUIDE}"))??;
    if from > to {
        return Err(format!("`{text}`: the range runs backwards; write current({to})..current({from})"));
    }
    if to - from >= RANGE_LIMIT {
        return Err(format!("`{text}`: a range of more than {RANGE_LIMIT} instances"));
    }
    Ok(TimeSelection::Current { from, to })
}
