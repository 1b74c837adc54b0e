//! `[engines.spark]` into `SparkSettings`: each value checked on its own
//! line, with what is expected, so that a typo in a master URL shows in
//! `trellis validate` rather than as a failed job.

use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::Checker;
use super::raw::RawSpark;
use crate::catalog::{DeployMode, SPARK_RESERVED_CONF, SparkMaster, SparkSettings};

/// The most jobs in flight one project may ask for: far above what any
/// cluster queue takes from one client, far below a semaphore's limit.
const MAX_CONCURRENCY: usize = 1024;

impl Checker<'_> {
    /// The Spark settings, with their defaults where the table says nothing
    /// (or has an error already reported).
    pub(super) fn spark(&mut self, raw: Option<&Spanned<RawSpark>>, root: &Path) -> SparkSettings {
        let mut spark = SparkSettings::default();
        let Some(raw) = raw else { return spark };
        spark.line = Some(self.lines.line(raw.span().start));
        let raw = raw.get_ref();
        if let Some(master) = &raw.master {
            match master.get_ref().parse::<SparkMaster>() {
                Ok(parsed) => spark.master = parsed,
                Err(message) => self.error(master.span().start, format!("engines.spark.master {message}")),
            }
        }
        if let Some(mode) = &raw.deploy_mode {
            match mode.get_ref().as_str() {
                "client" => spark.deploy_mode = DeployMode::Client,
                "cluster" => spark.deploy_mode = DeployMode::Cluster,
                other => self.error(
                    mode.span().start,
                    format!("engines.spark.deploy_mode `{other}`: expected `client` or `cluster`"),
                ),
            }
        }
        if spark.deploy_mode == DeployMode::Cluster {
            // trellis's program on Spark is Python, which a standalone
            // master runs in client mode only, and local mode has no cluster.
            let at = raw.deploy_mode.as_ref().map_or(0, |mode| mode.span().start);
            if spark.is_local() {
                self.error(
                    at,
                    "engines.spark.deploy_mode `cluster` needs a cluster master (yarn or k8s://...), not local mode",
                );
            } else if matches!(spark.master, SparkMaster::Standalone(_)) {
                self.error(
                    at,
                    "engines.spark.deploy_mode `cluster`: a standalone master (spark://) runs Python applications \
                     in client mode only; leave deploy_mode out",
                );
            }
        }
        if let Some(home) = &raw.spark_home {
            if home.get_ref().is_empty() {
                self.error(home.span().start, "engines.spark.spark_home is empty");
            } else {
                spark.spark_home = Some(root.join(home.get_ref()));
            }
        }
        if let Some(python) = &raw.python {
            if python.get_ref().trim().is_empty() {
                self.error(python.span().start, "engines.spark.python is empty");
            } else {
                spark.python = python.get_ref().clone();
            }
        }
        self.spark_properties(raw, &mut spark);
        self.spark_limits(raw, &mut spark);
        spark
    }

    /// `engines.spark.conf` (nested tables flattened to dotted keys) and
    /// `engines.spark.env`, each entry checked.
    fn spark_properties(&mut self, raw: &RawSpark, spark: &mut SparkSettings) {
        for (key, value) in &raw.conf {
            let mut flat = Vec::new();
            flatten(key, value.get_ref(), &mut flat);
            for (key, value) in flat {
                match check_conf(&key, value) {
                    Ok(value) => spark.conf.push((key, value)),
                    Err(message) => self.error(value_start(raw, &key), format!("engines.spark.conf {message}")),
                }
            }
        }
        for (name, value) in &raw.env {
            match check_env(name) {
                Ok(()) => spark.env.push((name.clone(), value.get_ref().clone())),
                Err(message) => self.error(value.span().start, format!("engines.spark.env {message}")),
            }
        }
    }

    /// How many jobs at once, a driver's memory, and the grace a stopped job gets.
    fn spark_limits(&mut self, raw: &RawSpark, spark: &mut SparkSettings) {
        if let Some(n) = &raw.concurrency {
            match usize::try_from(*n.get_ref()) {
                Ok(n) if (1..=MAX_CONCURRENCY).contains(&n) => spark.concurrency = n,
                _ => self.error(
                    n.span().start,
                    format!("engines.spark.concurrency must be from 1 to {MAX_CONCURRENCY}, not {}", n.get_ref()),
                ),
            }
        }
        if let Some(mib) = &raw.memory_mib {
            match usize::try_from(*mib.get_ref()) {
                Ok(mib) if mib >= 256 => spark.memory_mib = mib,
                _ => self.error(
                    mib.span().start,
                    format!("engines.spark.memory_mib must be at least 256 (a driver's heap), not {}", mib.get_ref()),
                ),
            }
        }
        if let Some(grace) = &raw.grace {
            match humantime::parse_duration(grace.get_ref()) {
                Ok(grace) if grace <= Duration::from_secs(600) => spark.grace = grace,
                Ok(_) => self.error(grace.span().start, "engines.spark.grace must be at most 10 minutes"),
                Err(e) => self.error(grace.span().start, format!("engines.spark.grace `{}`: {e}", grace.get_ref())),
            }
        }
    }
}

/// Where a property's value starts: its table's entry, for a key given
/// dotted (`spark.sql.x = 1`) and so nested by TOML.
fn value_start(raw: &RawSpark, key: &str) -> usize {
    let top = key.split('.').next().unwrap_or(key);
    raw.conf.get(key).or_else(|| raw.conf.get(top)).map_or(0, |value| value.span().start)
}

/// A property written with a dotted key (`spark.sql.shuffle.partitions =
/// 8` in `[engines.spark.conf]`) is a nested table to TOML: its name is
/// the path again.
fn flatten<'a>(key: &str, value: &'a toml::Value, into: &mut Vec<(String, &'a toml::Value)>) {
    match value {
        toml::Value::Table(table) => {
            for (inner, value) in table {
                flatten(&format!("{key}.{inner}"), value, into);
            }
        }
        value => into.push((key.to_string(), value)),
    }
}

/// A property: a `spark.` name trellis does not set itself, a string,
/// number or boolean value.
fn check_conf(key: &str, value: &toml::Value) -> Result<String, String> {
    if key.chars().any(|c| c == '=' || c.is_whitespace() || c.is_control()) {
        return Err(format!("{key:?} is not a property's name"));
    }
    if !key.starts_with("spark.") {
        return Err(format!("`{key}`: Spark properties start with `spark.` (Hadoop's with `spark.hadoop.`)"));
    }
    if let Some(reserved) = SPARK_RESERVED_CONF.iter().find(|reserved| reserved.eq_ignore_ascii_case(key)) {
        let instead = match *reserved {
            "spark.master" => "; set engines.spark.master",
            "spark.submit.deployMode" => "; set engines.spark.deploy_mode",
            "spark.driver.memory" => "; set engines.spark.memory_mib",
            _ => "",
        };
        return Err(format!("`{key}` is set by trellis for every job{instead}"));
    }
    match value {
        toml::Value::String(text) => Ok(text.clone()),
        toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => Ok(value.to_string()),
        other => Err(format!("`{key}` must be a string, number or boolean, not {}", other.type_str())),
    }
}

/// An environment variable's name, other than the ones trellis sets from
/// settings of its own.
fn check_env(name: &str) -> Result<(), String> {
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("`{name}` is not an environment variable's name (letters, digits and `_`)"));
    }
    match name {
        "SPARK_HOME" => Err("`SPARK_HOME`: set engines.spark.spark_home".into()),
        "PYSPARK_PYTHON" | "PYSPARK_DRIVER_PYTHON" => Err(format!("`{name}`: set engines.spark.python")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_spark_takes_are_accepted_and_others_refused_with_the_forms() {
        let lines: Vec<String> = [
            "local",
            "local[*]",
            "local[4]",
            "local[2,3]",
            "local[0]",
            "local[x]",
            "spark://h:7077",
            "spark://",
            "yarn",
            "k8s://https://k:6443",
            "mesos://h:5050",
            "",
        ]
        .iter()
        .map(|master| {
            let parsed = master.parse::<SparkMaster>();
            // What is accepted is written back as it was read.
            if let Ok(parsed) = &parsed {
                assert_eq!(parsed.to_string(), *master);
            }
            format!("{master:?}: {}", parsed.err().unwrap_or_else(|| "ok".into()))
        })
        .collect();
        expect_test::expect![[r#"
            "local": ok
            "local[*]": ok
            "local[4]": ok
            "local[2,3]": ok
            "local[0]": `local[0]`: expected local[*], local[N], spark://HOST:PORT, yarn or k8s://https://HOST:PORT
            "local[x]": `local[x]`: expected local[*], local[N], spark://HOST:PORT, yarn or k8s://https://HOST:PORT
            "spark://h:7077": ok
            "spark://": `spark://`: expected local[*], local[N], spark://HOST:PORT, yarn or k8s://https://HOST:PORT
            "yarn": ok
            "k8s://https://k:6443": ok
            "mesos://h:5050": `mesos://h:5050`: expected local[*], local[N], spark://HOST:PORT, yarn or k8s://https://HOST:PORT
            "": ``: expected local[*], local[N], spark://HOST:PORT, yarn or k8s://https://HOST:PORT
        "#]]
        .assert_eq(&(lines.join("\n") + "\n"));
    }
}
