//! Read access to a plugin's resolved configuration.

use crate::Failure;

/// The configuration a call received, in declaration order. Values are
/// strings; the host has already expanded functions like `dataIn()`.
#[derive(Debug, Clone, Copy)]
pub struct Config<'a> {
    entries: &'a [(String, String)],
}

impl<'a> Config<'a> {
    pub fn new(entries: &'a [(String, String)]) -> Self {
        Config { entries }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The value of `key`, or a fatal failure that names it.
    pub fn require(&self, key: &str) -> Result<&'a str, Failure> {
        self.get(key).ok_or_else(|| Failure::Fatal(format!("configuration key `{key}` is required")))
    }

    /// A comma-separated list, trimmed, without empty items. Missing means empty.
    pub fn list(&self, key: &str) -> Vec<&'a str> {
        self.get(key)
            .map(|value| value.split(',').map(str::trim).filter(|item| !item.is_empty()).collect())
            .unwrap_or_default()
    }

    pub fn entries(&self) -> &'a [(String, String)] {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<(String, String)> {
        vec![("group-by".into(), " shop , day,, ".into()), ("file".into(), "out.csv".into())]
    }

    #[test]
    fn get_require_and_list() {
        let entries = entries();
        let config = Config::new(&entries);
        assert_eq!(config.get("file"), Some("out.csv"));
        assert_eq!(config.get("nope"), None);
        assert_eq!(config.list("group-by"), vec!["shop", "day"]);
        assert!(config.list("nope").is_empty());
        assert_eq!(config.require("nope").unwrap_err(), Failure::Fatal("configuration key `nope` is required".into()));
    }
}
