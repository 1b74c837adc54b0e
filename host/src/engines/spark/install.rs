//! Finding Spark and Java, and installing PySpark from the package
//! registry into trellis's tools directory (`trellis engines install
//! spark`), so that a developer's local runs need nothing by hand.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::catalog::SparkSettings;

/// The PySpark `trellis engines install spark` installs: its wheel holds
/// Spark itself (jars, `spark-submit`), for local mode and as a client of
/// YARN, Kubernetes and standalone clusters.
pub const PYSPARK: &str = "4.3.0";

/// Spark 4 runs on Java 17 and newer.
const JAVA_MINIMUM: u32 = 17;

/// Where Spark and Java were found, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    pub spark_submit: PathBuf,
    /// `SPARK_HOME` for spark-submit.
    pub spark_home: PathBuf,
    /// Which rule found it: `engines.spark.spark_home`, `SPARK_HOME`,
    /// `trellis engines install spark` or `the PATH`.
    pub found_by: &'static str,
    pub java: PathBuf,
    pub java_version: String,
}

/// Where `trellis engines install spark` puts PySpark, in `tools`.
pub fn installed_dir(tools: &Path) -> PathBuf {
    tools.join(format!("pyspark-{PYSPARK}"))
}

/// Finds Spark, by the first rule that names it: `[engines.spark]
/// spark_home`, `$SPARK_HOME`, the PySpark installed in trellis's tools
/// directory, `spark-submit` on the PATH; and Java, by `JAVA_HOME` (the
/// settings' `env`, then the environment) or the PATH, 17 or newer. The
/// error is one line that says what is missing and how to get it.
pub fn locate(settings: &SparkSettings, tools: Option<&Path>) -> Result<Installation, String> {
    let (spark_home, found_by) = spark_home(settings, tools)?;
    let spark_submit = spark_home.join("bin").join("spark-submit");
    let (java, java_version) = java(settings)?;
    Ok(Installation { spark_submit, spark_home, found_by, java, java_version })
}

fn spark_home(settings: &SparkSettings, tools: Option<&Path>) -> Result<(PathBuf, &'static str), String> {
    let has_submit = |home: &Path| home.join("bin").join("spark-submit").is_file();
    if let Some(home) = &settings.spark_home {
        return if has_submit(home) {
            Ok((home.clone(), "engines.spark.spark_home"))
        } else {
            Err(format!("engines.spark.spark_home {} has no bin/spark-submit", home.display()))
        };
    }
    if let Some(home) = crate::python::env_path("SPARK_HOME") {
        return if has_submit(&home) {
            Ok((home, "SPARK_HOME"))
        } else {
            Err(format!("SPARK_HOME {} has no bin/spark-submit", home.display()))
        };
    }
    if let Some(tools) = tools {
        let home = installed_dir(tools).join("pyspark");
        if has_submit(&home) {
            return Ok((home, "trellis engines install spark"));
        }
    }
    if let Ok(on_path) = which::which("spark-submit") {
        // `SPARK_HOME/bin/spark-submit`, through whatever links lead there.
        let real = on_path.canonicalize().unwrap_or(on_path);
        if let Some(home) = real.parent().and_then(Path::parent) {
            return Ok((home.to_path_buf(), "the PATH"));
        }
    }
    let tools = tools.map_or_else(|| "trellis's tools directory".to_string(), |dir| dir.display().to_string());
    Err(format!(
        "Spark is not installed: no engines.spark.spark_home, no SPARK_HOME and no spark-submit on the PATH; \
         `trellis engines install spark` installs PySpark {PYSPARK} (about 500 MB) into {tools}"
    ))
}

/// Java, 17 or newer: `$JAVA_HOME/bin/java` (from `[engines.spark] env`,
/// else the environment), else `java` on the PATH. Asked its version once.
fn java(settings: &SparkSettings) -> Result<(PathBuf, String), String> {
    let java_home = settings
        .env
        .iter()
        .find(|(name, _)| name == "JAVA_HOME")
        .map(|(_, value)| PathBuf::from(value))
        .or_else(|| crate::python::env_path("JAVA_HOME"));
    let java = match &java_home {
        Some(home) => {
            let java = home.join("bin").join("java");
            if !java.is_file() {
                return Err(format!(
                    "Spark needs Java {JAVA_MINIMUM} or newer: JAVA_HOME {} has no bin/java",
                    home.display()
                ));
            }
            java
        }
        None => which::which("java").map_err(|_| {
            format!(
                "Spark needs Java {JAVA_MINIMUM} or newer: there is no `java` on the PATH and JAVA_HOME is not set \
                 (install a JDK, e.g. Debian's openjdk-17-jre-headless)"
            )
        })?,
    };
    let output = Command::new(&java)
        .arg("-version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("Spark needs Java {JAVA_MINIMUM} or newer: cannot run {}: {e}", java.display()))?;
    // `java -version` speaks on stderr: `openjdk version "17.0.15" 2025-04-15`.
    let said = String::from_utf8_lossy(&output.stderr);
    let version = said.lines().find_map(|line| line.split('"').nth(1)).unwrap_or_default().to_string();
    match java_major(&version) {
        Some(major) if major >= JAVA_MINIMUM => Ok((java, version)),
        Some(_) => Err(format!(
            "Spark needs Java {JAVA_MINIMUM} or newer: {} is Java {version}; set JAVA_HOME (or engines.spark.env) to a newer one",
            java.display()
        )),
        None => Err(format!(
            "Spark needs Java {JAVA_MINIMUM} or newer: {} did not say its version ({})",
            java.display(),
            crate::python::last_line(&output.stderr)
        )),
    }
}

/// `17.0.15` is 17, `1.8.0_402` is 8.
fn java_major(version: &str) -> Option<u32> {
    let mut parts = version.split(['.', '_', '-', '+']);
    match parts.next()?.parse().ok()? {
        1 => parts.next()?.parse().ok(),
        major => Some(major),
    }
}

/// Installs PySpark into `tools` unless it is there: pip builds its wheel
/// from the registry's source archive once (about 460 MB; pip's wheel
/// cache keeps it for the next install), and the directory is renamed into
/// place whole. `note` is told before a download starts. Returns where it is.
pub fn install(tools: &Path, note: &mut dyn FnMut(String)) -> Result<PathBuf, String> {
    let dir = installed_dir(tools);
    if dir.join("pyspark").join("bin").join("spark-submit").is_file() {
        return Ok(dir);
    }
    let python = crate::python::interpreter((3, 10)).map_err(|e| match e {
        crate::python::Error::NoPython { reason } => {
            format!(
                "installing PySpark needs Python 3.10 or newer with pip: {reason} (or name one with TRELLIS_PYTHON)"
            )
        }
        other => other.to_string(),
    })?;
    note(format!("installing PySpark {PYSPARK} into {} (once; about 500 MB from the package registry)", dir.display()));
    crate::python::pip_install(&python, tools, &dir, &format!("pyspark=={PYSPARK}"), "pyspark")
        .map_err(|reason| format!("cannot install PySpark {PYSPARK} into {}: {reason}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_versions_old_and_new() {
        assert_eq!(java_major("17.0.15"), Some(17));
        assert_eq!(java_major("21"), Some(21));
        assert_eq!(java_major("1.8.0_402"), Some(8));
        assert_eq!(java_major("25-ea"), Some(25));
        assert_eq!(java_major(""), None);
    }

    #[test]
    fn a_spark_home_without_spark_submit_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let settings = SparkSettings { spark_home: Some(dir.path().to_path_buf()), ..SparkSettings::default() };
        let error = locate(&settings, None).unwrap_err();
        assert_eq!(error, format!("engines.spark.spark_home {} has no bin/spark-submit", dir.path().display()));
    }
}
