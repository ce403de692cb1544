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
use std::time::{Duration, SystemTime};

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

/// The chain's credentials; with `policy`, its last exchange with STS
/// (a role, a web identity) narrowed by that session policy.
pub(super) async fn fetch(
    chain: &Chain,
    access: &Access,
    region: &str,
    policy: Option<&str>,
) -> Result<Fetched, String> {
    timed(fetch_untimed(chain, access, region, policy)).await
}

async fn timed(
    f: impl std::future::Future<Output = Result<Fetched, String>>,
) -> Result<Fetched, String> {
    match tokio::time::timeout(FETCH_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no credentials within {} s",
            FETCH_TIMEOUT.as_secs()
        )),
    }
}

fn https() -> aws_sdk_sts::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// STS as the SDKs configure it for `profile`: the run's shared files (a
/// `services` section, `endpoint_url`) and the environment's
/// AWS_ENDPOINT_URL_STS / AWS_ENDPOINT_URL.
async fn sts_config(
    http: &aws_sdk_sts::config::SharedHttpClient,
    access: &Access,
    profile: &str,
    region: &str,
) -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http.clone())
        .region(Region::new(region.to_owned()))
        .profile_files(
            EnvConfigFiles::builder()
                .with_file(EnvConfigFileKind::Config, &access.config_file)
                .with_file(EnvConfigFileKind::Credentials, &access.credentials_file)
                .build(),
        )
        .profile_name(profile)
        .no_credentials()
        .load()
        .await
}

/// An STS client signing with long-term `keys`.
async fn sts_with(access: &Access, region: &str, keys: &Credentials) -> aws_sdk_sts::Client {
    let sdk = sts_config(&https(), access, &access.profile, region).await;
    let config = aws_sdk_sts::config::Builder::from(&sdk)
        .credentials_provider(aws_credential_types::Credentials::new(
            &keys.access_key_id,
            &keys.secret_access_key,
            None,
            None,
            "skyc",
        ))
        .build();
    aws_sdk_sts::Client::from_conf(config)
}

/// STS's refusal in its own words (its code and message: not the
/// request id, which differs at each try), or why it did not answer.
fn refusal<E, R>(e: &aws_sdk_sts::error::SdkError<E, R>) -> String
where
    E: aws_sdk_sts::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    match e.as_service_error() {
        Some(s) => format!(
            "{}: {}",
            s.code().unwrap_or("refused"),
            s.message().unwrap_or_default()
        ),
        None => causes(e),
    }
}

/// STS's credentials as skyc holds them.
fn fetched(c: Option<&aws_sdk_sts::types::Credentials>, action: &str) -> Result<Fetched, String> {
    let c = c.ok_or_else(|| format!("STS {action} answered no credentials"))?;
    Ok(Fetched {
        credentials: Credentials {
            access_key_id: c.access_key_id().to_owned(),
            secret_access_key: c.secret_access_key().to_owned(),
            session_token: Some(c.session_token().to_owned()),
        },
        expires: SystemTime::try_from(*c.expiration()).ok(),
    })
}

/// STS `GetFederationToken` signed with long-term `keys`: credentials of
/// a federated user `name` that can do what both the keys' user and
/// `policy` allow, for `seconds`.
pub(super) async fn federation_token(
    access: &Access,
    region: &str,
    keys: &Credentials,
    name: &str,
    policy: &str,
    seconds: i32,
) -> Result<Fetched, String> {
    timed(async {
        let out = sts_with(access, region, keys)
            .await
            .get_federation_token()
            .name(name)
            .policy(policy)
            .duration_seconds(seconds)
            .send()
            .await
            .map_err(|e| format!("STS GetFederationToken: {}", refusal(&e)))?;
        fetched(out.credentials(), "GetFederationToken")
    })
    .await
}

/// STS `GetSessionToken` signed with long-term `keys`: temporary
/// credentials that can do what the keys can, for `seconds`.
pub(super) async fn session_token(
    access: &Access,
    region: &str,
    keys: &Credentials,
    seconds: i32,
) -> Result<Fetched, String> {
    timed(async {
        let out = sts_with(access, region, keys)
            .await
            .get_session_token()
            .duration_seconds(seconds)
            .send()
            .await
            .map_err(|e| format!("STS GetSessionToken: {}", refusal(&e)))?;
        fetched(out.credentials(), "GetSessionToken")
    })
    .await
}

async fn fetch_untimed(
    chain: &Chain,
    access: &Access,
    region: &str,
    policy: Option<&str>,
) -> Result<Fetched, String> {
    let http = https();
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
        } => {
            let mut b =
                aws_config::web_identity_token::WebIdentityTokenCredentialsProvider::builder()
                    .configure(&pc)
                    .static_configuration(aws_config::web_identity_token::StaticConfiguration {
                        web_identity_token_file: token_file.clone(),
                        role_arn: role_arn.clone(),
                        session_name: name.clone().unwrap_or_else(session_name),
                    });
            if let (Some(p), true) = (policy, chain.roles.is_empty()) {
                b = b.policy(p);
            }
            SharedCredentialsProvider::new(b.build())
        }
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
    for (i, role) in chain.roles.iter().enumerate() {
        let role_region = role.region.clone().unwrap_or_else(|| region.to_owned());
        let sdk = sts_config(&http, access, &role.profile, &role_region).await;
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
        if let (Some(p), true) = (policy, i + 1 == chain.roles.len()) {
            b = b.policy(p);
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
