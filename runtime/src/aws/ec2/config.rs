//! Credentials, region and endpoint from the standard AWS configuration,
//! read as the AWS SDKs and CLI read them: the environment first, then the
//! profile of the shared `config` and `credentials` files.
//!
//! - **Profile**: `AWS_PROFILE` (or the CLI's older `AWS_DEFAULT_PROFILE`),
//!   else `default`. In `~/.aws/config` it is `[profile NAME]` (`[default]`
//!   for the default), in `~/.aws/credentials` `[NAME]`; the files are
//!   `AWS_CONFIG_FILE` and `AWS_SHARED_CREDENTIALS_FILE` when set.
//! - **Credentials**: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+
//!   `AWS_SESSION_TOKEN`), else the profile's `aws_access_key_id`,
//!   `aws_secret_access_key`, `aws_session_token` in the credentials file,
//!   else in the config file. A profile that gets its credentials another
//!   way (`role_arn`, `sso_*`, `credential_process`,
//!   `web_identity_token_file`) is refused with how to export them: skyc
//!   does not assume roles, log in or run programs. Instance roles (IMDS)
//!   are not read either.
//! - **Region**: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's
//!   `region`. The group's spec names the region it was built for; the
//!   configured one is the fallback.
//! - **Endpoint** (the SDKs' "service-specific endpoints"):
//!   `AWS_ENDPOINT_URL_EC2`, `AWS_ENDPOINT_URL`, the `ec2` entry of the
//!   profile's `services` section, the profile's `endpoint_url`; none of
//!   them with `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true` (or the profile's
//!   `ignore_configured_endpoint_urls`); else EC2's own endpoint of the
//!   region.
//!
//! Pure: [`Settings::resolve`] takes the environment and a file reader.

use crate::aws::ec2::sigv4::Credentials;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the configuration says, ready for a client. Serializable: the
/// submitting client pins its settings in the group's plan (the store is
/// private to the user), so any later supervisor reaches EC2 as it did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    pub profile: String,
    pub credentials: Credentials,
    /// Where the credentials came from, for messages (`environment`,
    /// `~/.aws/credentials [default]`).
    pub credentials_source: String,
    pub region: Option<String>,
    /// An endpoint configured by the user; `None` is EC2's own.
    pub endpoint: Option<String>,
}

/// The credentials' source when they come from the environment.
const ENVIRONMENT: &str = "the environment";

/// Why there are no usable settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    NoCredentials {
        profile: String,
    },
    /// The key id is set without its secret, or the reverse.
    HalfCredentials {
        source: String,
        missing: &'static str,
    },
    /// `AWS_PROFILE` names a profile no file has.
    NoSuchProfile {
        profile: String,
        files: String,
    },
    /// The profile gets credentials in a way skyc does not follow.
    Unsupported {
        profile: String,
        key: String,
    },
    NoRegion,
    /// A shared file that exists cannot be read or parsed.
    BadFile {
        path: PathBuf,
        why: String,
    },
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::NoCredentials { profile } => write!(
                f,
                "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                 or give profile `{profile}` aws_access_key_id and aws_secret_access_key \
                 in ~/.aws/credentials (`aws configure`)"
            ),
            ConfigError::HalfCredentials { source, missing } => {
                write!(f, "AWS credentials in {source} lack {missing}")
            }
            ConfigError::NoSuchProfile { profile, files } => write!(
                f,
                "AWS profile `{profile}` (AWS_PROFILE) is in neither {files}"
            ),
            ConfigError::Unsupported { profile, key } => write!(
                f,
                "AWS profile `{profile}` gets its credentials through `{key}`, which skyc \
                 does not follow; export them first: \
                 eval \"$(aws configure export-credentials --profile {profile} --format env)\""
            ),
            ConfigError::NoRegion => write!(
                f,
                "no AWS region: set AWS_REGION, or `region` in the profile (~/.aws/config)"
            ),
            ConfigError::BadFile { path, why } => {
                write!(f, "cannot read {}: {why}", path.display())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// Keys that make a profile's credentials come from elsewhere.
const INDIRECT: &[&str] = &[
    "role_arn",
    "credential_process",
    "sso_session",
    "sso_start_url",
    "sso_account_id",
    "web_identity_token_file",
    "login_session",
];

impl Settings {
    /// Reads the configuration from `env` (a variable's value) and `read`
    /// (a file's text, `None` when there is no such file).
    pub fn resolve(
        env: &dyn Fn(&str) -> Option<String>,
        read: &dyn Fn(&Path) -> Result<Option<String>, String>,
    ) -> Result<Settings, ConfigError> {
        let var = |k: &str| env(k).filter(|v| !v.is_empty());
        let home = var("HOME").map(PathBuf::from).unwrap_or_default();
        let config_path = var("AWS_CONFIG_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".aws/config"));
        let credentials_path = var("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".aws/credentials"));
        let load = |path: &Path| -> Result<Option<Ini>, ConfigError> {
            read(path)
                .map_err(|why| ConfigError::BadFile {
                    path: path.to_owned(),
                    why,
                })
                .map(|text| text.map(|t| Ini::parse(&t)))
        };
        let config = load(&config_path)?.unwrap_or_default();
        let creds_file = load(&credentials_path)?.unwrap_or_default();
        let named = var("AWS_PROFILE").or_else(|| var("AWS_DEFAULT_PROFILE"));
        let profile = named.clone().unwrap_or_else(|| "default".to_owned());
        let config_section = if profile == "default" {
            config
                .section("default")
                .or_else(|| config.section("profile default"))
        } else {
            config.section(&format!("profile {profile}"))
        };
        let creds_section = creds_file.section(&profile);
        if named.is_some() && config_section.is_none() && creds_section.is_none() {
            return Err(ConfigError::NoSuchProfile {
                profile,
                files: format!(
                    "{} nor {}",
                    config_path.display(),
                    credentials_path.display()
                ),
            });
        }
        let empty = BTreeMap::new();
        let cfg = config_section.unwrap_or(&empty);
        let crd = creds_section.unwrap_or(&empty);

        let (credentials, credentials_source) =
            match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
                (Some(id), Some(secret)) => (
                    Credentials {
                        access_key_id: id,
                        secret_access_key: secret,
                        session_token: var("AWS_SESSION_TOKEN")
                            .or_else(|| var("AWS_SECURITY_TOKEN")),
                    },
                    ENVIRONMENT.to_owned(),
                ),
                (Some(_), None) => {
                    return Err(ConfigError::HalfCredentials {
                        source: ENVIRONMENT.into(),
                        missing: "AWS_SECRET_ACCESS_KEY",
                    });
                }
                (None, Some(_)) => {
                    return Err(ConfigError::HalfCredentials {
                        source: ENVIRONMENT.into(),
                        missing: "AWS_ACCESS_KEY_ID",
                    });
                }
                (None, None) => {
                    let from = |section: &BTreeMap<String, String>, path: &Path, name: &str| {
                        profile_credentials(section, &format!("{} [{name}]", path.display()))
                    };
                    let config_name = if profile == "default" {
                        "default".to_owned()
                    } else {
                        format!("profile {profile}")
                    };
                    match from(crd, &credentials_path, &profile)? {
                        Some(found) => found,
                        None => match from(cfg, &config_path, &config_name)? {
                            Some(found) => found,
                            None => {
                                if let Some(key) = INDIRECT
                                    .iter()
                                    .find(|k| cfg.contains_key(**k) || crd.contains_key(**k))
                                {
                                    return Err(ConfigError::Unsupported {
                                        profile,
                                        key: (*key).to_owned(),
                                    });
                                }
                                return Err(ConfigError::NoCredentials { profile });
                            }
                        },
                    }
                }
            };

        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .or_else(|| cfg.get("region").filter(|v| !v.is_empty()).cloned());

        let ignore = |v: Option<String>| v.is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let endpoint = if ignore(var("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"))
            || ignore(cfg.get("ignore_configured_endpoint_urls").cloned())
        {
            None
        } else {
            let services = cfg.get("services").and_then(|name| {
                config
                    .section(&format!("services {name}"))
                    .and_then(|s| s.get("ec2.endpoint_url"))
                    .cloned()
            });
            var("AWS_ENDPOINT_URL_EC2")
                .or_else(|| var("AWS_ENDPOINT_URL"))
                .or(services)
                .or_else(|| cfg.get("endpoint_url").cloned())
                .filter(|v| !v.is_empty())
        };

        Ok(Settings {
            profile,
            credentials,
            credentials_source,
            region,
            endpoint,
        })
    }

    /// [`Settings::resolve`] on this process's environment and files.
    pub fn from_env() -> Result<Settings, ConfigError> {
        Settings::resolve(&|k| std::env::var(k).ok(), &read_file)
    }

    /// Whether the credentials came from the environment (which nothing
    /// renews), not a profile.
    pub fn from_environment(&self) -> bool {
        self.credentials_source == ENVIRONMENT
    }

    /// The run's credentials as its profile gives them now, for a run
    /// whose pinned ones (`self`) EC2 refuses (expired, rotated): the
    /// pinned profile read from the shared files (`env` says only where
    /// they are), the pinned region and endpoint. Never from anywhere
    /// else, which could be another account whose EC2 shows none of the
    /// run's instances. `None` when the pinned ones came from the
    /// environment (nothing renews those), or the profile gives none or
    /// the same.
    pub fn renewed(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        read: &dyn Fn(&Path) -> Result<Option<String>, String>,
    ) -> Option<Settings> {
        if self.from_environment() {
            return None;
        }
        let env = |k: &str| match k {
            "AWS_PROFILE" => Some(self.profile.clone()),
            "HOME" | "AWS_CONFIG_FILE" | "AWS_SHARED_CREDENTIALS_FILE" => env(k),
            _ => None,
        };
        let now = Settings::resolve(&env, read).ok()?;
        (now.credentials != self.credentials).then(|| Settings {
            region: self.region.clone(),
            endpoint: self.endpoint.clone(),
            ..now
        })
    }

    /// [`Settings::renewed`] from this process's environment and files.
    pub fn renewed_here(&self) -> Option<Settings> {
        self.renewed(&|k| std::env::var(k).ok(), &read_file)
    }

    /// The region to work in: the one asked for (the spec's), else the
    /// configured one.
    pub fn region_or(&self, wanted: Option<&str>) -> Result<String, ConfigError> {
        wanted
            .map(str::to_owned)
            .or_else(|| self.region.clone())
            .ok_or(ConfigError::NoRegion)
    }
}

/// A shared file larger than this is refused rather than read whole.
const MAX_FILE_BYTES: usize = 1 << 20;

/// A profile section's static credentials, if it has any.
fn profile_credentials(
    section: &BTreeMap<String, String>,
    source: &str,
) -> Result<Option<(Credentials, String)>, ConfigError> {
    let get = |k: &str| section.get(k).filter(|v| !v.is_empty()).cloned();
    match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(id), Some(secret)) => Ok(Some((
            Credentials {
                access_key_id: id,
                secret_access_key: secret,
                session_token: get("aws_session_token").or_else(|| get("aws_security_token")),
            },
            source.to_owned(),
        ))),
        (Some(_), None) => Err(ConfigError::HalfCredentials {
            source: source.to_owned(),
            missing: "aws_secret_access_key",
        }),
        (None, Some(_)) => Err(ConfigError::HalfCredentials {
            source: source.to_owned(),
            missing: "aws_access_key_id",
        }),
        (None, None) => Ok(None),
    }
}

/// The shared files' INI dialect: `[section]`, `key = value`, comments
/// from `#` or `;` at a line's start, and indented `sub = value` lines
/// under a key with no value (`ec2 =` then `  endpoint_url = ...`), read
/// as `key.sub`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Ini {
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
fn read_file(path: &Path) -> Result<Option<String>, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_credentials_are_renewed_from_the_runs_profile() {
        let files = |key: &str| {
            vec![(
                "/home/u/.aws/credentials".to_owned(),
                format!(
                    "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = d\n\
                     [team]\naws_access_key_id = {key}\naws_secret_access_key = s\n\
                     aws_session_token = t\n"
                ),
            )]
        };
        let renewed = |pinned: &Settings, env: &[(&str, &str)], files: Vec<(String, String)>| {
            let env: BTreeMap<String, String> = env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let files: BTreeMap<PathBuf, String> =
                files.into_iter().map(|(k, v)| (k.into(), v)).collect();
            pinned.renewed(&|k| env.get(k).cloned(), &|p| Ok(files.get(p).cloned()))
        };
        let file_refs = files("AKOLD");
        let pinned = resolve(
            &[
                HOME,
                ("AWS_PROFILE", "team"),
                ("AWS_ENDPOINT_URL", "http://e:1"),
            ],
            &file_refs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        // The same ones: nothing to try.
        assert_eq!(renewed(&pinned, &[HOME], files("AKOLD")), None);
        // Renewed in the run's profile, found by a supervisor whose
        // environment names no profile and no endpoint: the run's kept.
        let now = renewed(&pinned, &[HOME], files("AKNEW")).unwrap();
        assert_eq!(now.credentials.access_key_id, "AKNEW");
        assert_eq!(now.profile, "team");
        assert_eq!(now.endpoint.as_deref(), Some("http://e:1"));
        // Only the run's profile: not the supervisor's environment's
        // credentials or profile, which may be another account's.
        let env = [
            HOME,
            ("AWS_ACCESS_KEY_ID", "AKENV"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("AWS_PROFILE", "default"),
        ];
        assert_eq!(renewed(&pinned, &env, files("AKOLD")), None);
        let now = renewed(&pinned, &env, files("AKNEW")).unwrap();
        assert_eq!(now.credentials.access_key_id, "AKNEW");
        // None to be found.
        assert_eq!(renewed(&pinned, &[HOME], vec![]), None);
        // Pinned from the environment: nothing renews them.
        let from_env = resolve(&env[..3], &[]).unwrap();
        assert_eq!(renewed(&from_env, &[HOME], files("AKNEW")), None);
    }

    fn resolve(env: &[(&str, &str)], files: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(k, v)| (PathBuf::from(k), (*v).to_owned()))
            .collect();
        Settings::resolve(&|k| env.get(k).cloned(), &|p| Ok(files.get(p).cloned()))
    }

    const HOME: (&str, &str) = ("HOME", "/home/u");

    #[test]
    fn environment_credentials_win() {
        let s = resolve(
            &[
                HOME,
                ("AWS_ACCESS_KEY_ID", "AKENV"),
                ("AWS_SECRET_ACCESS_KEY", "secret"),
                ("AWS_SESSION_TOKEN", "tok"),
                ("AWS_REGION", "eu-west-1"),
            ],
            &[(
                "/home/u/.aws/credentials",
                "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = s2\n",
            )],
        )
        .unwrap();
        assert_eq!(s.credentials.access_key_id, "AKENV");
        assert_eq!(s.credentials.session_token.as_deref(), Some("tok"));
        assert_eq!(s.credentials_source, "the environment");
        assert_eq!(s.region.as_deref(), Some("eu-west-1"));
        assert_eq!(s.endpoint, None);
    }

    #[test]
    fn profiles_from_the_shared_files() {
        let config = "\
[default]
region = us-east-1

[profile team]
region = us-west-2
services = local
# a comment
; another

[services local]
ec2 =
  endpoint_url = http://127.0.0.1:5000
s3 =
  endpoint_url = http://127.0.0.1:9000
";
        let creds = "[team]\naws_access_key_id = AKTEAM\naws_secret_access_key = s\n";
        let files = [
            ("/home/u/.aws/config", config),
            ("/home/u/.aws/credentials", creds),
        ];
        let s = resolve(&[HOME, ("AWS_PROFILE", "team")], &files).unwrap();
        assert_eq!(s.profile, "team");
        assert_eq!(s.credentials.access_key_id, "AKTEAM");
        assert_eq!(s.credentials_source, "/home/u/.aws/credentials [team]");
        assert_eq!(s.region.as_deref(), Some("us-west-2"));
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
        // The environment's endpoints come first, the EC2 one before the
        // global one; and the region variables before the profile's.
        let s = resolve(
            &[
                HOME,
                ("AWS_PROFILE", "team"),
                ("AWS_ENDPOINT_URL", "http://global"),
                ("AWS_DEFAULT_REGION", "ap-south-1"),
            ],
            &files,
        )
        .unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://global"));
        assert_eq!(s.region.as_deref(), Some("ap-south-1"));
        let s = resolve(
            &[
                HOME,
                ("AWS_PROFILE", "team"),
                ("AWS_ENDPOINT_URL", "http://global"),
                ("AWS_ENDPOINT_URL_EC2", "http://ec2"),
            ],
            &files,
        )
        .unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://ec2"));
        let s = resolve(
            &[
                HOME,
                ("AWS_PROFILE", "team"),
                ("AWS_ENDPOINT_URL", "http://global"),
                ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
            ],
            &files,
        )
        .unwrap();
        assert_eq!(s.endpoint, None);
        // The default profile has no credentials anywhere.
        assert_eq!(
            resolve(&[HOME], &files),
            Err(ConfigError::NoCredentials {
                profile: "default".into()
            })
        );
    }

    #[test]
    fn files_named_by_the_environment_and_credentials_in_config() {
        let s = resolve(
            &[
                HOME,
                ("AWS_CONFIG_FILE", "/etc/aws.conf"),
                ("AWS_SHARED_CREDENTIALS_FILE", "/nowhere"),
            ],
            &[(
                "/etc/aws.conf",
                "[default]\naws_access_key_id=AK\naws_secret_access_key=S\nendpoint_url=http://x:1\n",
            )],
        )
        .unwrap();
        assert_eq!(s.credentials.access_key_id, "AK");
        assert_eq!(s.credentials_source, "/etc/aws.conf [default]");
        assert_eq!(s.endpoint.as_deref(), Some("http://x:1"));
        assert_eq!(s.region, None);
        assert_eq!(s.region_or(Some("us-east-2")).unwrap(), "us-east-2");
        assert_eq!(s.region_or(None), Err(ConfigError::NoRegion));
    }

    #[test]
    fn clear_refusals() {
        let half = resolve(&[HOME, ("AWS_ACCESS_KEY_ID", "AK")], &[]).unwrap_err();
        assert_eq!(
            half.to_string(),
            "AWS credentials in the environment lack AWS_SECRET_ACCESS_KEY"
        );
        let missing = resolve(&[HOME, ("AWS_PROFILE", "nope")], &[]).unwrap_err();
        assert!(matches!(missing, ConfigError::NoSuchProfile { .. }));
        let sso = resolve(
            &[HOME, ("AWS_PROFILE", "dev")],
            &[(
                "/home/u/.aws/config",
                "[profile dev]\nsso_session = corp\nregion = us-east-1\n",
            )],
        )
        .unwrap_err();
        assert_eq!(
            sso,
            ConfigError::Unsupported {
                profile: "dev".into(),
                key: "sso_session".into()
            }
        );
        assert!(sso.to_string().contains("aws configure export-credentials"));
        let none = resolve(&[HOME], &[]).unwrap_err();
        assert!(none.to_string().starts_with("no AWS credentials"));
        let bad = Settings::resolve(&|k| (k == "HOME").then(|| "/h".to_owned()), &|_| {
            Err("permission denied".into())
        })
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "cannot read /h/.aws/config: permission denied"
        );
    }
}
