//! AWS credentials as the AWS CLI and SDKs find them, refreshed for as
//! long as a run lasts, and never stored.
//!
//! - **Which source** (`chain.rs`, pure over the environment and the
//!   shared files, `files.rs`): the SDKs' default chain in order: the
//!   environment's `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (+
//!   `AWS_SESSION_TOKEN`); the profile (`AWS_PROFILE`, else `default`),
//!   which may assume a role (`role_arn` with `source_profile`, chained,
//!   or `credential_source`; `external_id`, `role_session_name`,
//!   `duration_seconds`; `mfa_serial` refused: a supervisor cannot
//!   prompt), use IAM Identity Center (`sso_session` or the legacy
//!   `sso_start_url`, after `aws sso login`), a web identity token
//!   (`web_identity_token_file` with `role_arn`), its keys, or a
//!   `credential_process`; web identity from the environment
//!   (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, as on EKS); the
//!   container endpoint (`AWS_CONTAINER_CREDENTIALS_*`); the instance's
//!   role through IMDSv2 (unless `AWS_EC2_METADATA_DISABLED=true`).
//! - **Getting them** (`fetch.rs`): each source through the official
//!   `aws-config` crate's provider (STS `AssumeRole` and
//!   `AssumeRoleWithWebIdentity`, the SSO portal, IMDS, the container
//!   endpoint, the process), over rustls with ring.
//! - **Kept fresh** (`keeper.rs`): a run's group thread asks its source
//!   again before the credentials expire, and when EC2 refuses them; when
//!   the source gives none, the run is in an outage that says what to
//!   renew.
//! - **Given to nodes narrowed** (`scoped.rs`): the nodes that mount
//!   buckets get credentials STS made from the run's with the task's
//!   session policy, renewed on their own.
//! - **Never stored**: the plan keeps [`Access`] (the profile, the
//!   source's kind, the region, the EC2 endpoint and where the shared
//!   files are); the supervisor asks that source itself.

mod chain;
mod fetch;
pub(crate) mod files;
mod keeper;
mod scoped;

pub use chain::Source;
pub use keeper::{Keeper, REFRESH_BEFORE, Step};
pub use scoped::{Delivery, NodeCredentials};

use crate::aws::ec2::config::Settings;
use crate::aws::ec2::sigv4::Credentials;
use files::{Env, Files, Read};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::SystemTime;

/// The credentials' source when they come from the environment.
pub(crate) const ENVIRONMENT: &str = "the environment";

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
    /// The profile's role needs an MFA code.
    Mfa {
        profile: String,
        serial: String,
    },
    /// A profile that cannot be followed as it is.
    Profile {
        profile: String,
        why: String,
    },
    /// The run's source has no credentials any more.
    Gone {
        source: String,
        now: String,
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
                "no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY), profile `{profile}` gives none (~/.aws/config, \
                 ~/.aws/credentials: `aws configure`, `aws configure sso`), and no web \
                 identity, container or instance role is configured"
            ),
            ConfigError::HalfCredentials { source, missing } => {
                write!(f, "AWS credentials in {source} lack {missing}")
            }
            ConfigError::NoSuchProfile { profile, files } => {
                write!(f, "AWS profile `{profile}` is in neither {files}")
            }
            ConfigError::Unsupported { profile, key } => write!(
                f,
                "AWS profile `{profile}` gets its credentials through `{key}`, which skyc \
                 does not follow; export them first: \
                 eval \"$(aws configure export-credentials --profile {profile} --format env)\""
            ),
            ConfigError::Mfa { profile, serial } => write!(
                f,
                "AWS profile `{profile}` assumes its role with an MFA code (mfa_serial \
                 {serial}), which the supervisor cannot ask for while a run lasts; use a \
                 profile without mfa_serial, or export credentials you got with the code: \
                 eval \"$(aws configure export-credentials --profile {profile} --format env)\" \
                 (they are not renewed)"
            ),
            ConfigError::Profile { profile, why } => {
                write!(f, "AWS profile `{profile}` cannot be followed: {why}")
            }
            ConfigError::Gone { source, now } => {
                write!(f, "the run's AWS credentials came from {source}; {now}")
            }
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

/// How a run reaches AWS, as the stored plan keeps it: no secret, only
/// where the credentials come from, and the region and endpoint the
/// submitting client found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct Access {
    pub profile: String,
    pub source: Source,
    /// The configured region (the run works in its spec's).
    pub region: Option<String>,
    /// The configured EC2 endpoint; `None` is EC2's own.
    pub endpoint: Option<String>,
    /// The configured S3 endpoint (the run's files); `None` is S3's own.
    pub s3_endpoint: Option<String>,
    /// The configured IAM endpoint (the controller's role); `None` is
    /// IAM's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_endpoint: Option<String>,
    /// The shared files the client read (absolute), read again by the
    /// supervisor whatever its own environment names.
    pub config_file: PathBuf,
    pub credentials_file: PathBuf,
}

/// [`Access`] as stored, or as an older skyc stored its settings (with
/// the keys, which are not read: `credentials_source` tells whether
/// they came from the environment).
#[derive(Deserialize)]
struct Stored {
    profile: String,
    source: Option<Source>,
    region: Option<String>,
    endpoint: Option<String>,
    #[serde(default)]
    s3_endpoint: Option<String>,
    #[serde(default)]
    iam_endpoint: Option<String>,
    #[serde(default)]
    config_file: PathBuf,
    #[serde(default)]
    credentials_file: PathBuf,
    credentials_source: Option<String>,
}

impl From<Stored> for Access {
    fn from(s: Stored) -> Access {
        let source = s.source.unwrap_or_else(|| {
            if s.credentials_source.as_deref() == Some(ENVIRONMENT) {
                Source::Environment
            } else {
                Source::Profile
            }
        });
        Access {
            profile: s.profile,
            source,
            region: s.region,
            endpoint: s.endpoint,
            s3_endpoint: s.s3_endpoint,
            iam_endpoint: s.iam_endpoint,
            config_file: s.config_file,
            credentials_file: s.credentials_file,
        }
    }
}

/// Credentials as a source gave them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub credentials: Credentials,
    /// When they expire; `None` for long-term keys.
    pub expires: Option<SystemTime>,
}

impl Access {
    /// The access the environment and shared files configure, and the
    /// chain that gives its credentials now (pure: `env` gives a
    /// variable, `read` a file's text).
    pub fn resolve(env: Env<'_>, read: Read<'_>) -> Result<(Access, Chain), ConfigError> {
        let var = |k: &str| env(k).filter(|v| !v.is_empty());
        let files = Files::load(&var, read)?;
        let named = var("AWS_PROFILE").or_else(|| var("AWS_DEFAULT_PROFILE"));
        let profile = named.clone().unwrap_or_else(|| "default".to_owned());
        let (source, chain) = chain::choose(&var, &files, &profile, named.is_some())?;
        let p = files.profile(&profile).unwrap_or_default();
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .or_else(|| p.get("region").filter(|v| !v.is_empty()).cloned());
        let ignore = |v: Option<String>| v.is_some_and(|v| v.eq_ignore_ascii_case("true"));
        // The SDKs' order: the service's variable, the global one, the
        // profile's `services` section, its `endpoint_url`.
        let ignored = ignore(var("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"))
            || ignore(p.get("ignore_configured_endpoint_urls").cloned());
        let endpoint_of = |service: &str| {
            if ignored {
                return None;
            }
            var(&format!(
                "AWS_ENDPOINT_URL_{}",
                service.to_ascii_uppercase()
            ))
            .or_else(|| var("AWS_ENDPOINT_URL"))
            .or_else(|| files.service_endpoint(&p, service))
            .or_else(|| p.get("endpoint_url").cloned())
            .filter(|v| !v.is_empty())
        };
        let endpoint = endpoint_of("ec2");
        let s3_endpoint = endpoint_of("s3");
        let iam_endpoint = endpoint_of("iam");
        Ok((
            Access {
                profile,
                source,
                region,
                endpoint,
                s3_endpoint,
                iam_endpoint,
                config_file: files.config_path,
                credentials_file: files.credentials_path,
            },
            Chain(chain),
        ))
    }

    /// [`Access::resolve`] on this process's environment and files, the
    /// files' paths made absolute.
    pub fn from_env() -> Result<(Access, Chain), ConfigError> {
        let (mut access, chain) = Access::resolve(&|k| std::env::var(k).ok(), &files::read_file)?;
        for path in [&mut access.config_file, &mut access.credentials_file] {
            if let Ok(abs) = std::path::absolute(&*path) {
                *path = abs;
            }
        }
        Ok((access, chain))
    }

    /// The chain of the run's source as it is now: the stored files and
    /// profile, and `env` (the supervisor's own) only for what the source
    /// takes from an environment.
    pub fn again(&self, env: Env<'_>, read: Read<'_>) -> Result<Chain, ConfigError> {
        // An older plan names no files: the supervisor's are read.
        let path = |p: &PathBuf| Some(p.display().to_string()).filter(|p| !p.is_empty());
        let var = |k: &str| {
            match k {
                "AWS_CONFIG_FILE" => path(&self.config_file),
                "AWS_SHARED_CREDENTIALS_FILE" => path(&self.credentials_file),
                _ => None,
            }
            .or_else(|| env(k))
            .filter(|v| !v.is_empty())
        };
        let files = Files::load(&var, read)?;
        chain::again(&self.source, &var, &files, &self.profile).map(Chain)
    }

    /// A client's settings with `credentials` from `chain`.
    pub fn settings(&self, credentials: Credentials, chain: &Chain) -> Settings {
        Settings {
            profile: self.profile.clone(),
            credentials,
            credentials_source: chain.describe(),
            region: self.region.clone(),
            endpoint: self.endpoint.clone(),
        }
    }
}

/// How to get a run's credentials now: a source, followed through the
/// roles it assumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain(chain::Chain);

impl Chain {
    /// Where the credentials come from, for messages.
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// What to renew when they cannot be had.
    pub fn renew(&self) -> String {
        self.0.renew()
    }

    /// Asks the source (and STS for each role), `region` being the run's
    /// when the configuration names none.
    pub async fn fetch(&self, access: &Access, region: &str) -> Result<Fetched, String> {
        fetch::fetch(&self.0, access, region, None).await
    }
}

#[cfg(test)]
mod tests;
