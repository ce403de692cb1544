//! A chain's credentials, through the official `aws-config` providers:
//! the base source, then STS `AssumeRole` for each role in order, each
//! with the previous credentials. Every exchange is bounded in time.

use super::chain::{Base, Chain};
use super::{Access, Fetched};
use crate::aws::ec2::sigv4::Credentials;
use aws_config::provider_config::ProviderConfig;
use aws_config::{BehaviorVersion, Region};
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use std::time::Duration;

/// The longest one fetch may take (a source or STS that does not
/// answer must not hold a run's thread).
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// The session name of a role when the profile gives none.
fn session_name() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("skyc-{ms}")
}

pub(super) async fn fetch(chain: &Chain, access: &Access, region: &str) -> Result<Fetched, String> {
    match tokio::time::timeout(FETCH_TIMEOUT, fetch_untimed(chain, access, region)).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no credentials within {} s",
            FETCH_TIMEOUT.as_secs()
        )),
    }
}

async fn fetch_untimed(chain: &Chain, access: &Access, region: &str) -> Result<Fetched, String> {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let base_region = Region::new(region.to_owned());
    let pc = ProviderConfig::without_region()
        .with_http_client(http.clone())
        .with_region(Some(base_region));
    let mut provider: SharedCredentialsProvider = match &chain.base {
        Base::Keys { credentials, .. } => {
            SharedCredentialsProvider::new(aws_credential_types::Credentials::new(
                &credentials.access_key_id,
                &credentials.secret_access_key,
                credentials.session_token.clone(),
                None,
                "skyc",
            ))
        }
        Base::Process { command, .. } => SharedCredentialsProvider::new(
            aws_config::credential_process::CredentialProcessProvider::new(command.clone()),
        ),
        Base::Sso {
            start_url,
            region,
            account_id,
            role_name,
            session,
            ..
        } => {
            let mut b = aws_config::sso::SsoCredentialsProvider::builder()
                .configure(&pc)
                .start_url(start_url)
                .account_id(account_id)
                .role_name(role_name)
                .region(Region::new(region.clone()));
            if let Some(s) = session {
                b = b.session_name(s);
            }
            SharedCredentialsProvider::new(b.build())
        }
        Base::WebIdentity {
            token_file,
            role_arn,
            session_name: name,
        } => SharedCredentialsProvider::new(
            aws_config::web_identity_token::WebIdentityTokenCredentialsProvider::builder()
                .configure(&pc)
                .static_configuration(aws_config::web_identity_token::StaticConfiguration {
                    web_identity_token_file: token_file.clone(),
                    role_arn: role_arn.clone(),
                    session_name: name.clone().unwrap_or_else(session_name),
                })
                .build(),
        ),
        Base::Container => SharedCredentialsProvider::new(
            aws_config::ecs::EcsCredentialsProvider::builder()
                .configure(&pc)
                .build(),
        ),
        Base::InstanceMetadata { endpoint } => {
            // Off EC2 (the chain's last resort, when nothing else is
            // configured) it must fail fast, as the CLI's does.
            let mut client = aws_config::imds::Client::builder()
                .configure(&pc)
                .connect_timeout(Duration::from_secs(1))
                .max_attempts(2);
            if let Some(e) = endpoint {
                client = client
                    .endpoint(e)
                    .map_err(|e| format!("the metadata service's endpoint: {e}"))?;
            }
            SharedCredentialsProvider::new(
                aws_config::imds::credentials::ImdsCredentialsProvider::builder()
                    .configure(&pc)
                    .imds_client(client.build())
                    .build(),
            )
        }
    };
    for role in &chain.roles {
        let role_region = role.region.clone().unwrap_or_else(|| region.to_owned());
        // STS as the SDKs configure it: the run's shared files (a
        // `services` section, `endpoint_url`) and the environment's
        // AWS_ENDPOINT_URL_STS / AWS_ENDPOINT_URL.
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http.clone())
            .region(Region::new(role_region.clone()))
            .profile_files(
                EnvConfigFiles::builder()
                    .with_file(EnvConfigFileKind::Config, &access.config_file)
                    .with_file(EnvConfigFileKind::Credentials, &access.credentials_file)
                    .build(),
            )
            .profile_name(&role.profile)
            .no_credentials()
            .load()
            .await;
        let mut b = aws_config::sts::AssumeRoleProvider::builder(&role.arn)
            .configure(&sdk)
            .region(Region::new(role_region))
            .session_name(role.session_name.clone().unwrap_or_else(session_name));
        if let Some(id) = &role.external_id {
            b = b.external_id(id);
        }
        if let Some(d) = role.duration_seconds {
            b = b.session_length(Duration::from_secs(d.into()));
        }
        provider = SharedCredentialsProvider::new(b.build_from_provider(provider).await);
    }
    let c = provider
        .provide_credentials()
        .await
        .map_err(|e| causes(&e))?;
    Ok(Fetched {
        credentials: Credentials {
            access_key_id: c.access_key_id().to_owned(),
            secret_access_key: c.secret_access_key().to_owned(),
            session_token: c.session_token().map(str::to_owned),
        },
        expires: c.expiry(),
    })
}

/// An error and its causes, outermost first, each once (the SDK's errors
/// nest the service's message several levels down).
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(e) = next {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}
