//! `${name}` templates: path templates, dependency parameter bindings and
//! the variables of transformation configuration.

use std::fmt;

/// A piece of text with `${...}` placeholders: literal text (`$$` already
/// made `$`), or the body of a placeholder.
pub(super) enum Segment<'a> {
    Literal(String),
    Placeholder(&'a str),
}

/// What a `$` that starts neither `$$` nor `${` is.
pub(super) enum LoneDollar<'a> {
    Literal,
    /// An error, with this message.
    Refuse(&'a dyn Fn() -> String),
}

/// Splits `text` at its `${...}` placeholders, the one scanner behind path
/// templates and configuration values. `closing` finds a placeholder's `}`
/// in what follows `${`; no two literal segments are adjacent.
pub(super) fn segments<'a>(
    text: &'a str,
    lone_dollar: LoneDollar<'_>,
    closing: impl Fn(&str) -> Option<usize>,
) -> Result<Vec<Segment<'a>>, String> {
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        literal.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            literal.push('$');
            rest = after;
            continue;
        }
        let Some(body) = rest.strip_prefix('{') else {
            match lone_dollar {
                LoneDollar::Literal => {
                    literal.push('$');
                    continue;
                }
                LoneDollar::Refuse(message) => return Err(message()),
            }
        };
        let end = closing(body).ok_or_else(|| format!("unclosed `${{` in `{text}`"))?;
        if !literal.is_empty() {
            segments.push(Segment::Literal(std::mem::take(&mut literal)));
        }
        segments.push(Segment::Placeholder(&body[..end]));
        rest = &body[end + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    Ok(segments)
}

/// A string with `${name}` placeholders, parsed once at load.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Template {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Piece {
    Literal(String),
    Variable(String),
}

impl Template {
    /// Parses `text`; `$$` is a literal `$`. Variable names are identifiers.
    pub fn parse(text: &str) -> Result<Template, String> {
        let lone_dollar = || format!("`$` must start `${{name}}` (or be doubled, `$$`) in `{text}`");
        let segments = segments(text, LoneDollar::Refuse(&lone_dollar), |body| body.find('}'))?;
        let pieces = segments
            .into_iter()
            .map(|segment| match segment {
                Segment::Literal(literal) => Ok(Piece::Literal(literal)),
                Segment::Placeholder(body) => {
                    let name = body.trim();
                    if is_identifier(name) {
                        Ok(Piece::Variable(name.to_string()))
                    } else {
                        Err(format!("`${{{name}}}` in `{text}` is not a variable name"))
                    }
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Template { pieces })
    }

    /// The variables it uses, in order of appearance.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Variable(name) => Some(name.as_str()),
            Piece::Literal(_) => None,
        })
    }

    /// The literal text, if the template has no variables.
    pub fn as_literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [] => Some(""),
            [Piece::Literal(text)] => Some(text),
            _ => None,
        }
    }

    /// Substitutes every variable with `value(name)`. Callers check at load
    /// that every variable is known, so a missing one here is a bug in the
    /// caller and renders as empty.
    pub fn render<'a>(&self, mut value: impl FnMut(&str) -> Option<&'a str>) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Literal(text) => out.push_str(text),
                Piece::Variable(name) => out.push_str(value(name).unwrap_or_default()),
            }
        }
        out
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for piece in &self.pieces {
            match piece {
                Piece::Literal(text) => f.write_str(&text.replace('$', "$$"))?,
                Piece::Variable(name) => write!(f, "${{{name}}}")?,
            }
        }
        Ok(())
    }
}

pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_renders_and_round_trips() {
        let template = Template::parse("raw/${shop}/${YEAR}-$${x}").unwrap();
        assert_eq!(template.variables().collect::<Vec<_>>(), ["shop", "YEAR"]);
        let rendered = template.render(|name| match name {
            "shop" => Some("SHOP10"),
            "YEAR" => Some("2015"),
            _ => None,
        });
        assert_eq!(rendered, "raw/SHOP10/2015-${x}");
        assert_eq!(template.to_string(), "raw/${shop}/${YEAR}-$${x}");
        assert_eq!(Template::parse("plain").unwrap().as_literal(), Some("plain"));
    }

    #[test]
    fn rejects_what_it_cannot_mean() {
        assert_eq!(Template::parse("a/${shop").unwrap_err(), "unclosed `${` in `a/${shop`");
        assert_eq!(
            Template::parse("a/$shop").unwrap_err(),
            "`$` must start `${name}` (or be doubled, `$$`) in `a/$shop`"
        );
        assert_eq!(Template::parse("${a b}").unwrap_err(), "`${a b}` in `${a b}` is not a variable name");
    }
}
