//! The schema checksum of a view type: what its stored data looks like, so
//! that a change of it drops the type's views from the metastore.

use crate::catalog::template::Template;
use crate::catalog::time::Dataset;
use crate::catalog::{Field, Parameter, ParameterKind};

/// blake3 over a canonical rendering of what a view type stores: its
/// parameters, fields and their types, its time partitioning and storage.
/// Comments, key order and formatting of the file do not enter it.
///
/// The rendering is one JSON object with these keys in this (alphabetical)
/// order; it is
/// what every stored checksum was computed over, so it never changes.
pub(super) fn schema_checksum(
    parameters: &[Parameter],
    fields: &[Field],
    time: Option<&Dataset>,
    path: &Template,
    format: &str,
    done_flag: &str,
) -> String {
    #[derive(serde::Serialize)]
    struct Canonical<'a> {
        done_flag: &'a str,
        fields: Vec<[&'a str; 2]>,
        format: &'a str,
        parameters: Vec<[&'a str; 2]>,
        path: String,
        time: Option<[String; 2]>,
    }
    let canonical = Canonical {
        parameters: parameters.iter().map(|p| [p.name.as_str(), kind_name(p.kind)]).collect(),
        fields: fields.iter().map(|f| [f.name.as_str(), f.kind.as_str()]).collect(),
        time: time.map(|t| [t.frequency().to_string(), t.timezone().to_string()]),
        path: path.to_string(),
        format,
        done_flag,
    };
    // Serialized straight from the struct: building a JSON value first was a
    // tenth of loading 100,000 view types.
    let rendered = serde_json::to_vec(&canonical).expect("strings and arrays serialize");
    blake3::hash(&rendered).to_hex().to_string()
}

/// A parameter kind as the file spells it; the checksum holds it, so it
/// never changes.
pub(super) fn kind_name(kind: ParameterKind) -> &'static str {
    match kind {
        ParameterKind::String => "string",
        ParameterKind::Int => "int",
        ParameterKind::Boolean => "boolean",
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::catalog::parse;

    fn checksum(text: &str) -> String {
        let catalog = parse(text, Path::new("/project")).unwrap_or_else(|e| panic!("{e}"));
        catalog.find("s.raw/Orders").unwrap().schema_checksum.clone()
    }

    const BASE: &str = r#"
[[view]]
name = "s.raw/Orders"
comment = "orders"
parameters = [{ name = "shop" }]
fields = [{ name = "id", type = "string" }, { name = "amount", type = "decimal" }]
time = { frequency = "1d", initial = "2015-01-01" }
"#;

    /// Every checksum stored so far was computed over this rendering: the
    /// one function must give exactly what it gave.
    #[test]
    fn schema_checksums_are_those_stored_so_far() {
        let orders = checksum(BASE);
        let canonical = r#"{"done_flag":"_SUCCESS","fields":[["id","string"],["amount","decimal"]],"format":"csv","parameters":[["shop","string"]],"path":"s/raw/Orders/${shop}/${YEAR}/${MONTH}/${DAY}","time":["1d","UTC"]}"#;
        assert_eq!(orders, blake3::hash(canonical.as_bytes()).to_hex().to_string());
    }

    #[test]
    fn schema_checksum_ignores_key_order_comments_and_documentation() {
        let reordered = r#"
# a comment
[[view]]
time = { initial = "2015-01-01", frequency = "1d" }   # inline comment
fields = [{ type = "string", name = "id" }, { type = "decimal", name = "amount", comment = "EUR" }]
parameters = [{ comment = "the shop", name = "shop" }]
comment = "other documentation"
name = "s.raw/Orders"
"#;
        assert_eq!(checksum(BASE), checksum(reordered));
        // The initial instance says which views exist, not what they hold.
        assert_eq!(checksum(BASE), checksum(&BASE.replace("2015-01-01", "2016-01-01")));
    }

    #[test]
    fn schema_checksum_changes_with_the_schema() {
        let base = checksum(BASE);
        let changes = [
            BASE.replace(r#"type = "decimal""#, r#"type = "double""#),
            BASE.replace(r#"name = "amount""#, r#"name = "total""#),
            BASE.replace(
                r#"{ name = "amount", type = "decimal" }"#,
                r#"{ name = "amount", type = "decimal" }, { name = "x", type = "int" }"#,
            ),
            BASE.replace(r#"[{ name = "shop" }]"#, r#"[{ name = "shop", type = "int" }]"#),
            BASE.replace(r#"frequency = "1d""#, r#"frequency = "1M""#),
            BASE.replace(r#"initial = "2015-01-01" }"#, r#"initial = "2015-01-01", timezone = "Europe/Berlin" }"#),
            format!("{BASE}format = \"parquet\"\n"),
            format!("{BASE}done_flag = \"\"\n"),
            format!("{BASE}path = \"orders/${{shop}}/${{YEAR}}/${{MONTH}}/${{DAY}}\"\n"),
        ];
        for changed in &changes {
            assert_ne!(checksum(changed), base, "{changed}");
        }
    }
}
