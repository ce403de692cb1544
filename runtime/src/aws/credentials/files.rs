//! The shared `config` and `credentials` files, read as the AWS CLI
//! reads them: where they are, their INI dialect, and a profile as the
//! two files give it together (the credentials file's keys over the
//! config file's).

use crate::aws::ec2::config::ConfigError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A variable's value, `None` when unset or empty.
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;
/// A file's text, `None` when there is no such file.
pub(crate) type Read<'a> = &'a dyn Fn(&Path) -> Result<Option<String>, String>;

/// Both files, parsed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Files {
    pub(crate) config_path: PathBuf,
    pub(crate) credentials_path: PathBuf,
    config: Ini,
    credentials: Ini,
}

/// A profile's keys, from both files.
pub(crate) type Profile = BTreeMap<String, String>;

impl Files {
    /// `AWS_CONFIG_FILE` and `AWS_SHARED_CREDENTIALS_FILE`, else
    /// `~/.aws/config` and `~/.aws/credentials`; a missing file is empty.
    pub(crate) fn load(env: Env<'_>, read: Read<'_>) -> Result<Files, ConfigError> {
        let home = env("HOME").map(PathBuf::from).unwrap_or_default();
        let config_path = env("AWS_CONFIG_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".aws/config"));
        let credentials_path = env("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".aws/credentials"));
        let load = |path: &Path| -> Result<Ini, ConfigError> {
            read(path)
                .map_err(|why| ConfigError::BadFile {
                    path: path.to_owned(),
                    why,
                })
                .map(|text| text.map(|t| Ini::parse(&t)).unwrap_or_default())
        };
        Ok(Files {
            config: load(&config_path)?,
            credentials: load(&credentials_path)?,
            config_path,
            credentials_path,
        })
    }

    /// Profile `name` from both files, the credentials file's keys
    /// winning; `None` when neither has it.
    pub(crate) fn profile(&self, name: &str) -> Option<Profile> {
        let config = if name == "default" {
            self.config
                .section("default")
                .or_else(|| self.config.section("profile default"))
        } else {
            self.config.section(&format!("profile {name}"))
        };
        let credentials = self.credentials.section(name);
        if config.is_none() && credentials.is_none() {
            return None;
        }
        let mut merged = config.cloned().unwrap_or_default();
        merged.extend(credentials.cloned().unwrap_or_default());
        Some(merged)
    }

    /// Which file gives profile `name` key `key`, for messages
    /// (`~/.aws/credentials [team]`).
    pub(crate) fn where_is(&self, name: &str, key: &str) -> String {
        if self
            .credentials
            .section(name)
            .is_some_and(|s| s.contains_key(key))
        {
            format!("{} [{name}]", self.credentials_path.display())
        } else if name == "default" {
            format!("{} [default]", self.config_path.display())
        } else {
            format!("{} [profile {name}]", self.config_path.display())
        }
    }

    /// A section of the config file other than a profile
    /// (`sso-session NAME`, `services NAME`).
    pub(crate) fn section(&self, kind: &str, name: &str) -> Option<&BTreeMap<String, String>> {
        self.config.section(&format!("{kind} {name}"))
    }

    /// The endpoint the profile's `services` section gives `service`
    /// (`ec2`, `sts`).
    pub(crate) fn service_endpoint(&self, profile: &Profile, service: &str) -> Option<String> {
        let services = profile.get("services")?;
        self.section("services", services)?
            .get(&format!("{service}.endpoint_url"))
            .filter(|v| !v.is_empty())
            .cloned()
    }
}

/// The shared files' INI dialect: `[section]`, `key = value`, comments
/// from `#` or `;` at a line's start, and indented `sub = value` lines
/// under a key with no value (`ec2 =` then `  endpoint_url = ...`), read
/// as `key.sub`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ini {
    sections: BTreeMap<String, BTreeMap<String, String>>,
}

impl Ini {
    fn parse(text: &str) -> Ini {
        let mut ini = Ini::default();
        let mut current: Option<String> = None;
        let mut parent: Option<String> = None;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
                continue;
            }
            if let Some(rest) = trimmed.strip_prefix('[') {
                let name = rest.strip_suffix(']').unwrap_or(rest);
                let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
                ini.sections.entry(name.clone()).or_default();
                current = Some(name);
                parent = None;
                continue;
            }
            let Some(section) = current.as_ref().and_then(|c| ini.sections.get_mut(c)) else {
                continue;
            };
            let Some((key, value)) = trimmed.split_once('=') else {
                continue;
            };
            let (key, value) = (key.trim().to_owned(), value.trim().to_owned());
            let indented = line.starts_with([' ', '\t']);
            match (&parent, indented) {
                (Some(p), true) => {
                    section.insert(format!("{p}.{key}"), value);
                }
                _ => {
                    parent = value.is_empty().then(|| key.clone());
                    section.insert(key, value);
                }
            }
        }
        ini
    }

    fn section(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.sections.get(name)
    }
}

/// A configuration file's text; `None` when there is none.
pub(crate) fn read_file(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read(path) {
        Ok(bytes) if bytes.len() > MAX_FILE_BYTES => {
            Err(format!("larger than {MAX_FILE_BYTES} bytes"))
        }
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| "not UTF-8".to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// A shared file larger than this is refused rather than read whole.
const MAX_FILE_BYTES: usize = 1 << 20;
