//! `sql-checksum`: the version checksum of a SQL transformation, by
//! Schedoscope's rule for Hive queries: what changes the query's meaning
//! changes the checksum, and nothing else does.
//!
//! The SQL comes from the configuration key `query` and from every named
//! resource (query files); all of them count. Before hashing with blake3 it is normalized: `--` and
//! `/* */` comments are removed, `SET ...;` statements are dropped, and runs
//! of whitespace outside quotes become one space. Text inside '...', "..."
//! and `...` is kept exactly.

use trellis_plugin_sdk::{Checksum, ChecksumInput, ConfigKey, PluginInfo, export_checksum};

struct SqlChecksum;

impl Checksum for SqlChecksum {
    fn describe() -> PluginInfo {
        PluginInfo::new("sql-checksum", env!("CARGO_PKG_VERSION"))
            .description("blake3 of a SQL query without comments, SET statements and insignificant whitespace")
            .config_key(ConfigKey::optional("query", "the SQL text (default: the first resource)"))
    }

    fn checksum(input: ChecksumInput) -> Result<String, String> {
        // Every piece of SQL counts: the `query` key, then each resource in
        // order, each normalized.
        let mut pieces = Vec::new();
        if let Some(query) = input.config().get("query") {
            pieces.push(("query".to_string(), query.to_string()));
        }
        for resource in &input.resources {
            let text = String::from_utf8(resource.content.clone())
                .map_err(|_| format!("resource `{}` is not UTF-8 text", resource.name))?;
            pieces.push((resource.name.clone(), text));
        }
        if pieces.is_empty() {
            return Err("no `query` in the configuration and no resource to read it from".to_string());
        }
        let mut hasher = blake3::Hasher::new();
        for (name, sql) in &pieces {
            let normalized = normalize(sql).map_err(|e| format!("{name}: {e}"))?;
            // Lengths frame each piece, so that text cannot move between
            // them. Names are not hashed: renaming a file changes no logic.
            hasher.update(&(normalized.len() as u64).to_le_bytes());
            hasher.update(normalized.as_bytes());
        }
        Ok(hasher.finalize().to_hex().to_string())
    }
}

export_checksum!(SqlChecksum);

/// Comments out, whitespace collapsed, statements split on `;` outside
/// quotes, `SET` statements dropped, rejoined with `;`.
fn normalize(sql: &str) -> Result<String, String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut chars = sql.chars().peekable();
    // A pending space is written only before the next significant character,
    // so leading, trailing and repeated whitespace all disappear.
    let mut pending_space = false;
    while let Some(c) = chars.next() {
        match c {
            '-' if chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                pending_space = true;
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut previous = '\0';
                let mut closed = false;
                for c in chars.by_ref() {
                    if previous == '*' && c == '/' {
                        closed = true;
                        break;
                    }
                    previous = c;
                }
                if !closed {
                    return Err("unterminated /* comment".to_string());
                }
                pending_space = true;
            }
            ';' => {
                statements.push(std::mem::take(&mut current));
                pending_space = false;
            }
            c if c.is_whitespace() => pending_space = true,
            '\'' | '"' | '`' => {
                if pending_space && !current.is_empty() {
                    current.push(' ');
                }
                pending_space = false;
                current.push(c);
                let quote = c;
                let mut closed = false;
                while let Some(q) = chars.next() {
                    current.push(q);
                    // Hive string literals have backslash escapes; backtick
                    // identifiers do not.
                    if q == '\\' && quote != '`' {
                        if let Some(escaped) = chars.next() {
                            current.push(escaped);
                        }
                    } else if q == quote {
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    return Err(format!("unterminated {quote} quote"));
                }
            }
            c => {
                if pending_space && !current.is_empty() {
                    current.push(' ');
                }
                pending_space = false;
                current.push(c);
            }
        }
    }
    statements.push(current);
    let kept: Vec<String> =
        statements.into_iter().filter(|statement| !statement.is_empty() && !is_set_statement(statement)).collect();
    Ok(kept.join(";"))
}

fn is_set_statement(statement: &str) -> bool {
    let first_word = statement.split(' ').next().unwrap_or_default();
    first_word.eq_ignore_ascii_case("set")
}
