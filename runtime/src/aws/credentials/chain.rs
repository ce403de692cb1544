//! Which source gives the credentials, decided from the environment and
//! the shared files alone (pure): the order of the SDKs' default chain,
//! and a profile followed as the AWS CLI follows it.

use super::ConfigError;
use super::files::{Env, Files, Profile};
use crate::aws::ec2::sigv4::Credentials;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where a run's credentials come from: what the stored plan keeps, so
/// that the supervisor asks the same source again (never one found
/// first in its own environment, which may be another account's). No
/// secret: keys are read where they are each time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Source {
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`: the supervisor's
    /// environment (normally the submitting `skyc run`'s).
    Environment,
    /// The run's profile in the shared files, followed as a whole
    /// (keys, `credential_process`, roles, SSO, web identity).
    Profile,
    /// `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` (EKS): the token
    /// file is read again for each exchange.
    WebIdentity {
        token_file: PathBuf,
        role_arn: String,
        session_name: Option<String>,
    },
    /// The container credentials endpoint (`AWS_CONTAINER_CREDENTIALS_*`
    /// of the supervisor's environment: ECS, EKS Pod Identity).
    Container,
    /// The instance's role, through IMDSv2.
    InstanceMetadata { endpoint: Option<String> },
}

/// The first credentials of a chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Base {
    /// Keys from the environment or a profile (`from` says where).
    Keys {
        credentials: Credentials,
        from: String,
    },
    Process {
        command: String,
        profile: String,
    },
    Sso {
        profile: String,
        start_url: String,
        region: String,
        account_id: String,
        role_name: String,
        /// The `sso-session` section's name (`None`: the legacy form).
        session: Option<String>,
    },
    WebIdentity {
        token_file: PathBuf,
        role_arn: String,
        session_name: Option<String>,
    },
    Container,
    InstanceMetadata {
        endpoint: Option<String>,
    },
}

/// A role assumed through STS `AssumeRole`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Role {
    pub(crate) profile: String,
    pub(crate) arn: String,
    pub(crate) external_id: Option<String>,
    pub(crate) session_name: Option<String>,
    pub(crate) duration_seconds: Option<u32>,
    pub(crate) region: Option<String>,
}

/// The base's credentials, then each role assumed with the previous
/// credentials, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Chain {
    pub(crate) base: Base,
    pub(crate) roles: Vec<Role>,
}

impl Chain {
    fn of(base: Base) -> Chain {
        Chain {
            base,
            roles: Vec::new(),
        }
    }

    /// Where the credentials come from, for messages.
    pub(crate) fn describe(&self) -> String {
        let base = match &self.base {
            Base::Keys { from, .. } => format!("the keys in {from}"),
            Base::Process { command, profile } => {
                format!("profile `{profile}`'s credential_process `{command}`")
            }
            Base::Sso {
                profile,
                account_id,
                role_name,
                ..
            } => format!(
                "profile `{profile}`'s IAM Identity Center role {role_name} in account {account_id}"
            ),
            Base::WebIdentity {
                token_file,
                role_arn,
                ..
            } => format!(
                "role {role_arn} assumed with the web identity token in {}",
                token_file.display()
            ),
            Base::Container => "the container credentials endpoint".to_owned(),
            Base::InstanceMetadata { .. } => "the instance's role (IMDS)".to_owned(),
        };
        match self.roles.last() {
            None => base,
            Some(role) => format!(
                "role {} of profile `{}`, assumed from {base}",
                role.arn, role.profile
            ),
        }
    }

    /// What to renew when the source gives no credentials.
    pub(crate) fn renew(&self) -> String {
        match &self.base {
            Base::Keys { from, .. } if from == super::ENVIRONMENT => {
                "they came from the environment of the skyc command that started the \
                 supervisor, which nothing renews: export renewed ones where you run skyc \
                 and end the supervisor (the pid in the state directory's supervisor.pid); \
                 the next skyc command starts one with them"
                    .to_owned()
            }
            Base::Keys { from, .. } => format!("renew the keys in {from}"),
            Base::Process { profile, .. } => {
                format!("make profile `{profile}`'s credential_process give credentials again")
            }
            Base::Sso {
                profile, session, ..
            } => match session {
                Some(s) => format!("log in again: aws sso login --sso-session {s}"),
                None => format!("log in again: aws sso login --profile {profile}"),
            },
            Base::WebIdentity { token_file, .. } => format!(
                "the token in {} must be valid for the role",
                token_file.display()
            ),
            Base::Container => {
                "the container credentials endpoint must answer (AWS_CONTAINER_CREDENTIALS_*)"
                    .to_owned()
            }
            Base::InstanceMetadata { .. } => {
                "the instance must have a role and its metadata service (IMDS) must answer"
                    .to_owned()
            }
        }
    }
}

/// `AWS_ACCESS_KEY_ID` and its secret from the environment, if set.
fn environment_keys(env: Env<'_>) -> Result<Option<Credentials>, ConfigError> {
    let half = |missing| ConfigError::HalfCredentials {
        source: super::ENVIRONMENT.into(),
        missing,
    };
    match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => Ok(Some(Credentials {
            access_key_id: id,
            secret_access_key: secret,
            session_token: env("AWS_SESSION_TOKEN").or_else(|| env("AWS_SECURITY_TOKEN")),
        })),
        (Some(_), None) => Err(half("AWS_SECRET_ACCESS_KEY")),
        (None, Some(_)) => Err(half("AWS_ACCESS_KEY_ID")),
        (None, None) => Ok(None),
    }
}

/// The chain of the SDKs: the environment's keys, the profile, web
/// identity from the environment, the container endpoint, the
/// instance's role. `profile` is the profile in use, `named` whether the
/// user named it (a named profile must exist).
pub(crate) fn choose(
    env: Env<'_>,
    files: &Files,
    profile: &str,
    named: bool,
) -> Result<(Source, Chain), ConfigError> {
    if let Some(credentials) = environment_keys(env)? {
        return Ok((
            Source::Environment,
            Chain::of(Base::Keys {
                credentials,
                from: super::ENVIRONMENT.into(),
            }),
        ));
    }
    if files.profile(profile).is_none() && named {
        return Err(ConfigError::NoSuchProfile {
            profile: profile.to_owned(),
            files: format!(
                "{} nor {}",
                files.config_path.display(),
                files.credentials_path.display()
            ),
        });
    }
    if let Some(chain) = profile_chain(env, files, profile, &mut Vec::new())? {
        return Ok((Source::Profile, chain));
    }
    if let Some((token_file, role_arn, session_name)) = web_identity(env)? {
        return Ok((
            Source::WebIdentity {
                token_file: token_file.clone(),
                role_arn: role_arn.clone(),
                session_name: session_name.clone(),
            },
            Chain::of(Base::WebIdentity {
                token_file,
                role_arn,
                session_name,
            }),
        ));
    }
    if env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
    {
        return Ok((Source::Container, Chain::of(Base::Container)));
    }
    if env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Err(ConfigError::NoCredentials {
            profile: profile.to_owned(),
        });
    }
    let endpoint = imds_endpoint(env, files, profile);
    Ok((
        Source::InstanceMetadata {
            endpoint: endpoint.clone(),
        },
        Chain::of(Base::InstanceMetadata { endpoint }),
    ))
}

/// The chain of a stored source, asked again by the supervisor: the same
/// source only.
pub(crate) fn again(
    source: &Source,
    env: Env<'_>,
    files: &Files,
    profile: &str,
) -> Result<Chain, ConfigError> {
    match source {
        Source::Environment => match environment_keys(env)? {
            Some(credentials) => Ok(Chain::of(Base::Keys {
                credentials,
                from: super::ENVIRONMENT.into(),
            })),
            None => Err(ConfigError::Gone {
                source: "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)".into(),
                now: "this supervisor's environment has none: it was started by a skyc \
                      command without them; export them where you run skyc and end the \
                      supervisor (the pid in the state directory's supervisor.pid), and the \
                      next skyc command starts one with them"
                    .into(),
            }),
        },
        Source::Profile => match files.profile(profile) {
            None => Err(ConfigError::NoSuchProfile {
                profile: profile.to_owned(),
                files: format!(
                    "{} nor {}",
                    files.config_path.display(),
                    files.credentials_path.display()
                ),
            }),
            Some(_) => profile_chain(env, files, profile, &mut Vec::new())?.ok_or_else(|| {
                ConfigError::Gone {
                    source: format!("profile `{profile}`"),
                    now: "it gives no credentials now".into(),
                }
            }),
        },
        Source::WebIdentity {
            token_file,
            role_arn,
            session_name,
        } => Ok(Chain::of(Base::WebIdentity {
            token_file: token_file.clone(),
            role_arn: role_arn.clone(),
            session_name: session_name.clone(),
        })),
        Source::Container => Ok(Chain::of(Base::Container)),
        Source::InstanceMetadata { endpoint } => Ok(Chain::of(Base::InstanceMetadata {
            endpoint: endpoint.clone(),
        })),
    }
}

/// `AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN` (and
/// `AWS_ROLE_SESSION_NAME`), if set.
fn web_identity(env: Env<'_>) -> Result<Option<(PathBuf, String, Option<String>)>, ConfigError> {
    match (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN")) {
        (Some(file), Some(arn)) => Ok(Some((
            PathBuf::from(file),
            arn,
            env("AWS_ROLE_SESSION_NAME"),
        ))),
        (Some(_), None) => Err(ConfigError::HalfCredentials {
            source: "the environment's web identity".into(),
            missing: "AWS_ROLE_ARN",
        }),
        _ => Ok(None),
    }
}

/// The metadata service's endpoint when configured (else the SDK's).
fn imds_endpoint(env: Env<'_>, files: &Files, profile: &str) -> Option<String> {
    env("AWS_EC2_METADATA_SERVICE_ENDPOINT").or_else(|| {
        files
            .profile(profile)
            .and_then(|p| value(&p, "ec2_metadata_service_endpoint"))
    })
}

/// A key's value, when set and not empty.
fn value(p: &Profile, key: &str) -> Option<String> {
    p.get(key).filter(|v| !v.is_empty()).cloned()
}

/// A profile's static keys, if it has them.
fn profile_keys(files: &Files, name: &str, p: &Profile) -> Result<Option<Base>, ConfigError> {
    let from = files.where_is(name, "aws_access_key_id");
    match (
        value(p, "aws_access_key_id"),
        value(p, "aws_secret_access_key"),
    ) {
        (Some(id), Some(secret)) => Ok(Some(Base::Keys {
            credentials: Credentials {
                access_key_id: id,
                secret_access_key: secret,
                session_token: value(p, "aws_session_token")
                    .or_else(|| value(p, "aws_security_token")),
            },
            from,
        })),
        (Some(_), None) => Err(ConfigError::HalfCredentials {
            source: from,
            missing: "aws_secret_access_key",
        }),
        (None, Some(_)) => Err(ConfigError::HalfCredentials {
            source: from,
            missing: "aws_access_key_id",
        }),
        (None, None) => Ok(None),
    }
}

/// The credentials profile `name` gives, followed through its
/// `source_profile`s; `None` when it gives none (the chain goes on).
/// `seen`: the profiles already followed, to refuse a cycle.
fn profile_chain(
    env: Env<'_>,
    files: &Files,
    name: &str,
    seen: &mut Vec<String>,
) -> Result<Option<Chain>, ConfigError> {
    let Some(p) = files.profile(name) else {
        return Ok(None);
    };
    let bad = |why: String| ConfigError::Profile {
        profile: name.to_owned(),
        why,
    };
    if value(&p, "login_session").is_some() {
        return Err(ConfigError::Unsupported {
            profile: name.to_owned(),
            key: "login_session".into(),
        });
    }
    if let Some(arn) = value(&p, "role_arn") {
        if let Some(serial) = value(&p, "mfa_serial") {
            return Err(ConfigError::Mfa {
                profile: name.to_owned(),
                serial,
            });
        }
        let duration_seconds = match value(&p, "duration_seconds") {
            None => None,
            Some(d) => match d.parse::<u32>() {
                Ok(n) if (900..=43_200).contains(&n) => Some(n),
                _ => {
                    return Err(bad(format!(
                        "duration_seconds `{d}` is not a number of seconds from 900 to 43200"
                    )));
                }
            },
        };
        let role = Role {
            profile: name.to_owned(),
            arn: arn.clone(),
            external_id: value(&p, "external_id"),
            session_name: value(&p, "role_session_name"),
            duration_seconds,
            region: value(&p, "region"),
        };
        let source = value(&p, "source_profile");
        let named = value(&p, "credential_source");
        let mut chain = match (source, named) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "it has both source_profile and credential_source; keep one".into(),
                ));
            }
            (None, None) => match value(&p, "web_identity_token_file") {
                // A role assumed with a web identity token: one exchange.
                Some(file) => {
                    return Ok(Some(Chain::of(Base::WebIdentity {
                        token_file: PathBuf::from(file),
                        role_arn: arn,
                        session_name: value(&p, "role_session_name"),
                    })));
                }
                None => {
                    return Err(bad(format!(
                        "role_arn {arn} needs source_profile or credential_source"
                    )));
                }
            },
            (None, Some(named)) => Chain::of(match named.as_str() {
                "Environment" => Base::Keys {
                    credentials: environment_keys(env)?.ok_or_else(|| {
                        bad(
                            "credential_source = Environment, and AWS_ACCESS_KEY_ID is not set"
                                .into(),
                        )
                    })?,
                    from: super::ENVIRONMENT.into(),
                },
                "Ec2InstanceMetadata" => Base::InstanceMetadata {
                    endpoint: imds_endpoint(env, files, name),
                },
                "EcsContainer" => Base::Container,
                other => {
                    return Err(bad(format!(
                        "credential_source `{other}` is none of Environment, \
                         Ec2InstanceMetadata, EcsContainer"
                    )));
                }
            }),
            (Some(source), None) if source == name => match profile_keys(files, name, &p)? {
                Some(keys) => Chain::of(keys),
                None => {
                    return Err(bad(
                        "source_profile names the profile itself, which has no keys".into(),
                    ));
                }
            },
            (Some(source), None) => {
                if seen.contains(&source) || source == name {
                    return Err(bad(format!(
                        "source_profile `{source}` leads back to a profile already followed"
                    )));
                }
                let Some(sp) = files.profile(&source) else {
                    return Err(bad(format!(
                        "source_profile `{source}` is in neither {} nor {}",
                        files.config_path.display(),
                        files.credentials_path.display()
                    )));
                };
                // A source profile's own keys come before its role, as
                // the CLI and SDKs take them.
                match profile_keys(files, &source, &sp)? {
                    Some(keys) => Chain::of(keys),
                    None => {
                        seen.push(name.to_owned());
                        profile_chain(env, files, &source, seen)?.ok_or_else(|| {
                            bad(format!("source_profile `{source}` gives no credentials"))
                        })?
                    }
                }
            }
        };
        chain.roles.push(role);
        return Ok(Some(chain));
    }
    if let Some(chain) = sso(files, name, &p)? {
        return Ok(Some(chain));
    }
    if let Some(keys) = profile_keys(files, name, &p)? {
        return Ok(Some(Chain::of(keys)));
    }
    if let Some(command) = value(&p, "credential_process") {
        return Ok(Some(Chain::of(Base::Process {
            command,
            profile: name.to_owned(),
        })));
    }
    if value(&p, "web_identity_token_file").is_some() {
        return Err(bad("web_identity_token_file needs role_arn".into()));
    }
    Ok(None)
}

/// IAM Identity Center: an `sso_session` (its `[sso-session NAME]`
/// section has the start URL and region) or the legacy keys in the
/// profile itself; the account and role are the profile's.
fn sso(files: &Files, name: &str, p: &Profile) -> Result<Option<Chain>, ConfigError> {
    let session = value(p, "sso_session");
    if session.is_none() && value(p, "sso_start_url").is_none() {
        if value(p, "sso_account_id").is_some() || value(p, "sso_role_name").is_some() {
            return Err(ConfigError::Profile {
                profile: name.to_owned(),
                why: "sso_account_id and sso_role_name need sso_session (or sso_start_url)".into(),
            });
        }
        return Ok(None);
    }
    let missing = |key: &str, place: String| ConfigError::Profile {
        profile: name.to_owned(),
        why: format!("IAM Identity Center needs {key} in {place}"),
    };
    let (start_url, region) = match &session {
        Some(s) => {
            let place = format!("[sso-session {s}] of {}", files.config_path.display());
            let Some(section) = files.section("sso-session", s) else {
                return Err(missing("the section", place));
            };
            let get = |k: &str| section.get(k).filter(|v| !v.is_empty()).cloned();
            (
                get("sso_start_url").ok_or_else(|| missing("sso_start_url", place.clone()))?,
                get("sso_region").ok_or_else(|| missing("sso_region", place.clone()))?,
            )
        }
        None => (
            value(p, "sso_start_url").unwrap_or_default(),
            value(p, "sso_region")
                .ok_or_else(|| missing("sso_region", format!("profile `{name}`")))?,
        ),
    };
    let here = || format!("profile `{name}`");
    Ok(Some(Chain::of(Base::Sso {
        profile: name.to_owned(),
        start_url,
        region,
        account_id: value(p, "sso_account_id").ok_or_else(|| missing("sso_account_id", here()))?,
        role_name: value(p, "sso_role_name").ok_or_else(|| missing("sso_role_name", here()))?,
        session,
    })))
}
