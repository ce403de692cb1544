//! What an EC2 client is made with: credentials, where they came from,
//! the configured region and endpoint. Found by
//! [`crate::aws::credentials`] (the environment and the shared files, as
//! the AWS CLI reads them); held in memory only, never stored.

use crate::aws::ec2::sigv4::Credentials;

pub use crate::aws::credentials::ConfigError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub profile: String,
    pub credentials: Credentials,
    /// Where the credentials came from, for messages (`the environment`,
    /// `the keys in ~/.aws/credentials [default]`).
    pub credentials_source: String,
    pub region: Option<String>,
    /// An endpoint configured by the user; `None` is EC2's own.
    pub endpoint: Option<String>,
}

impl Settings {
    /// The settings this process's environment and files give, with
    /// credentials from their source now (blocking: for tests and tools
    /// outside a runtime). `region` is the one to work in when none is
    /// configured.
    pub fn from_env(region: &str) -> Result<Settings, String> {
        let (access, chain) =
            crate::aws::credentials::Access::from_env().map_err(|e| e.to_string())?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let fetched = rt
            .block_on(chain.fetch(&access, region))
            .map_err(|e| format!("the AWS credentials of {}: {e}", chain.describe()))?;
        Ok(access.settings(fetched.credentials, &chain))
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
