//! The AWS shared profile, the one link of the standard credential chain
//! the `object_store` crate does not read: `~/.aws/credentials` and
//! `~/.aws/config` (or `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`),
//! the profile `AWS_PROFILE` names or `default`.
//!
//! Environment variables win over the profile, as in every AWS SDK: a
//! profile's key is added only where the environment has none. Web
//! identity, the container's and the instance's credentials come after
//! it, from `object_store` itself. Invariant: a profile file that is
//! missing or unreadable adds nothing (the chain goes on), and no value
//! read here is ever logged.

use std::collections::HashMap;
use std::path::PathBuf;

/// The keys of a profile taken, by the environment variable each stands for.
const TAKEN: [(&str, &str); 4] = [
    ("aws_access_key_id", "AWS_ACCESS_KEY_ID"),
    ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
    ("aws_session_token", "AWS_SESSION_TOKEN"),
    ("region", "AWS_REGION"),
];

/// `environment`'s variables, with the shared profile's settings added as
/// the variables they stand for where the environment has none.
pub fn with_profile(environment: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut variables: HashMap<String, String> = environment.into_iter().collect();
    // Credentials come whole from one place: a key id in the environment
    // means the environment's secret, never the profile's.
    let has_credentials = variables.contains_key("AWS_ACCESS_KEY_ID");
    let profile = variables.get("AWS_PROFILE").cloned().unwrap_or_else(|| "default".into());
    let home = variables.get("HOME").map(PathBuf::from);
    let file = |variable: &str, name: &str| {
        variables.get(variable).map(PathBuf::from).or_else(|| home.as_ref().map(|home| home.join(".aws").join(name)))
    };
    // The credentials file names sections by the profile; the config file
    // `[profile NAME]`, but `[default]`.
    let config_section = if profile == "default" { profile.clone() } else { format!("profile {profile}") };
    let sources = [
        (file("AWS_SHARED_CREDENTIALS_FILE", "credentials"), profile.clone()),
        (file("AWS_CONFIG_FILE", "config"), config_section),
    ];
    let mut found = Vec::new();
    for (path, section) in sources {
        let Some(path) = path else { continue };
        let Ok(ini) = ini::Ini::load_from_file(&path) else { continue };
        let Some(properties) = ini.section(Some(section.as_str())) else { continue };
        for (key, variable) in TAKEN {
            let credential = variable != "AWS_REGION";
            if let Some(value) = properties.get(key)
                && !(credential && has_credentials)
            {
                found.push((variable.to_string(), value.to_string()));
            }
        }
    }
    for (variable, value) in found {
        variables.entry(variable).or_insert(value);
    }
    variables.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variables(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sorted(mut found: Vec<(String, String)>) -> Vec<(String, String)> {
        found.retain(|(name, _)| name.starts_with("AWS_") && name != "AWS_PROFILE");
        found.sort();
        found
    }

    /// The named profile's credentials and its config's region are taken;
    /// the environment's own credentials and region win over them whole.
    #[test]
    fn the_shared_profile_fills_in_what_the_environment_lacks() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n[team]\naws_access_key_id = T\naws_secret_access_key = TS\naws_session_token = TT\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[default]\nregion = eu-west-1\n[profile team]\nregion = us-west-2\n",
        )
        .unwrap();
        let home_dir = home.path().to_str().unwrap();
        let found = sorted(with_profile(variables(&[("HOME", home_dir), ("AWS_PROFILE", "team")])));
        assert_eq!(
            found,
            variables(&[
                ("AWS_ACCESS_KEY_ID", "T"),
                ("AWS_REGION", "us-west-2"),
                ("AWS_SECRET_ACCESS_KEY", "TS"),
                ("AWS_SESSION_TOKEN", "TT")
            ])
        );
        let found = sorted(with_profile(variables(&[("HOME", home_dir)])));
        assert_eq!(
            found,
            variables(&[("AWS_ACCESS_KEY_ID", "D"), ("AWS_REGION", "eu-west-1"), ("AWS_SECRET_ACCESS_KEY", "DS")])
        );
        let own = [("HOME", home_dir), ("AWS_ACCESS_KEY_ID", "E"), ("AWS_REGION", "ap-south-1")];
        assert_eq!(
            sorted(with_profile(variables(&own))),
            variables(&[("AWS_ACCESS_KEY_ID", "E"), ("AWS_REGION", "ap-south-1")]),
            "no secret of the profile's beside the environment's key id"
        );
        assert_eq!(sorted(with_profile(variables(&[("HOME", "/nonexistent")]))), Vec::<(String, String)>::new());
    }
}
