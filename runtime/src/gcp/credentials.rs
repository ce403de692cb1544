//! Google Cloud credentials, found where Google's own libraries find them
//! (Application Default Credentials), never copied anywhere:
//!
//! 1. `STORAGE_EMULATOR_HOST`: a GCS emulator, reached without
//!    credentials, as Google's libraries reach it;
//! 2. the file `GOOGLE_APPLICATION_CREDENTIALS` names;
//! 3. `gcloud auth application-default login`'s file
//!    (`$CLOUDSDK_CONFIG`, else `~/.config/gcloud`);
//! 4. the metadata server of a Google Cloud instance (its service
//!    account).
//!
//! A file holds a service account's key (a token asked for with a JWT the
//! key signs) or a user's refresh token. The project a bucket is made in
//! is the environment's (`GOOGLE_CLOUD_PROJECT`, ...), else the file's,
//! else `gcloud`'s configured one, else the instance's.

use crate::aws::ec2::client::{Error, Https, exchange};
use crate::objects::Body;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The scope a token is asked for: buckets made, read, written, deleted.
const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.full_control";

/// Google's token endpoint, where a file names none.
const TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// The metadata server, where `GCE_METADATA_HOST` names none.
const METADATA_HOST: &str = "metadata.google.internal";

/// The largest token answer read.
const MAX_ANSWER: usize = 64 << 10;

/// How a submission reaches Google Cloud Storage.
#[derive(Clone, Debug)]
pub struct Access {
    pub how: How,
    /// The project buckets are made in, when one is configured.
    pub project: Option<String>,
}

#[derive(Clone)]
pub enum How {
    /// An emulator at this endpoint (`http://host:port`), reached
    /// without credentials.
    Emulator(String),
    ServiceAccount {
        email: String,
        /// The private key, PKCS#8 DER.
        key: Vec<u8>,
        token_uri: String,
    },
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
    },
    /// The metadata server at this host.
    Metadata(String),
}

impl std::fmt::Debug for How {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            How::Emulator(e) => write!(f, "Emulator({e})"),
            How::ServiceAccount { email, .. } => write!(f, "ServiceAccount({email})"),
            How::AuthorizedUser { .. } => write!(f, "AuthorizedUser"),
            How::Metadata(h) => write!(f, "Metadata({h})"),
        }
    }
}

impl Access {
    /// The credentials this environment gives, as Google's libraries find
    /// them; a file that cannot be read or used is an error, not skipped.
    pub fn from_env() -> Result<Access, String> {
        match var("STORAGE_EMULATOR_HOST") {
            Some(host) => Ok(Access::emulated(&host)),
            None => Access::google(),
        }
    }

    /// The credentials for a bucket made at `endpoint`: the emulator it
    /// names (without reading any credentials), else Google's own (with
    /// Application Default Credentials, whatever emulator the
    /// environment names).
    pub fn at(endpoint: Option<String>) -> Result<Access, String> {
        match endpoint {
            Some(e) => Ok(Access::emulated(&e)),
            None => Access::google(),
        }
    }

    /// The emulator at `host` (`host:port`, or a URL).
    fn emulated(host: &str) -> Access {
        let endpoint = if host.contains("://") {
            host.trim_end_matches('/').to_owned()
        } else {
            format!("http://{}", host.trim_end_matches('/'))
        };
        Access {
            how: How::Emulator(endpoint),
            project: env_project().or_else(|| Some("skyc".into())),
        }
    }

    /// Application Default Credentials: a file, else the metadata server.
    fn google() -> Result<Access, String> {
        let config = var("CLOUDSDK_CONFIG")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".config/gcloud")));
        let file = match var("GOOGLE_APPLICATION_CREDENTIALS") {
            Some(f) => Some(PathBuf::from(f)),
            None => config
                .as_ref()
                .map(|c| c.join("application_default_credentials.json"))
                .filter(|f| f.is_file()),
        };
        let (how, file_project) = match file {
            Some(f) => read_file(&f)?,
            None => (
                How::Metadata(var("GCE_METADATA_HOST").unwrap_or_else(|| METADATA_HOST.into())),
                None,
            ),
        };
        let project = env_project()
            .or(file_project)
            .or_else(|| config.as_deref().and_then(gcloud_project));
        Ok(Access { how, project })
    }

    /// The emulator's endpoint, when it is one.
    pub fn emulator(&self) -> Option<&str> {
        match &self.how {
            How::Emulator(e) => Some(e),
            _ => None,
        }
    }

    /// An access token for [`SCOPE`] and how long it lasts (none for an
    /// emulator), asked for with `http` within `limit`; and the project,
    /// asked of the metadata server when none is configured there.
    pub async fn token(
        &mut self,
        http: &HttpClient<Https, Body>,
        limit: Duration,
    ) -> Result<Option<(String, Duration)>, Error> {
        let form = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| format!("{k}={}", crate::aws::ec2::sigv4::encode(v)))
                .collect::<Vec<_>>()
                .join("&")
        };
        let (uri, body, headers) = match &self.how {
            How::Emulator(_) => return Ok(None),
            How::ServiceAccount {
                email,
                key,
                token_uri,
            } => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let assertion = jwt(email, key, token_uri, now)?;
                let body = form(&[
                    ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                    ("assertion", &assertion),
                ]);
                (token_uri.clone(), Some(body), vec![])
            }
            How::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
                token_uri,
            } => {
                let body = form(&[
                    ("grant_type", "refresh_token"),
                    ("client_id", client_id),
                    ("client_secret", client_secret),
                    ("refresh_token", refresh_token),
                ]);
                (token_uri.clone(), Some(body), vec![])
            }
            How::Metadata(host) => (
                format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/token"),
                None,
                vec![("metadata-flavor", "Google")],
            ),
        };
        let text = call(http, &uri, body, &headers, limit).await?;
        let answer: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::Response {
                service: "Google OAuth",
                action: "token".into(),
                why: e.to_string(),
            })?;
        let token = answer["access_token"]
            .as_str()
            .ok_or_else(|| Error::Response {
                service: "Google OAuth",
                action: "token".into(),
                why: "no access_token".into(),
            })?
            .to_owned();
        if let (How::Metadata(host), None) = (&self.how, &self.project) {
            let uri = format!("http://{host}/computeMetadata/v1/project/project-id");
            let headers = [("metadata-flavor", "Google")];
            self.project = call(http, &uri, None, &headers, limit)
                .await
                .ok()
                .map(|p| p.trim().to_owned());
        }
        // An hour, as Google's tokens last, when the answer does not say.
        let lasts = Duration::from_secs(answer["expires_in"].as_u64().unwrap_or(3600));
        Ok(Some((token, lasts)))
    }
}

fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// The project the environment names.
fn env_project() -> Option<String> {
    [
        "GOOGLE_CLOUD_PROJECT",
        "GCLOUD_PROJECT",
        "CLOUDSDK_CORE_PROJECT",
    ]
    .iter()
    .find_map(|k| var(k))
}

/// One request of the token exchange: a form `POST`, or a `GET` without a
/// body; the answer's text, or the error Google's answer says.
async fn call(
    http: &HttpClient<Https, Body>,
    uri: &str,
    form: Option<String>,
    headers: &[(&str, &str)],
    limit: Duration,
) -> Result<String, Error> {
    let endpoint = uri.split('/').take(3).collect::<Vec<_>>().join("/");
    let mut req = http::Request::builder()
        .method(if form.is_some() { "POST" } else { "GET" })
        .uri(uri)
        .header(
            http::header::USER_AGENT,
            concat!("skyc/", env!("CARGO_PKG_VERSION")),
        );
    if form.is_some() {
        req = req.header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        );
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = crate::objects::full(Bytes::from(form.unwrap_or_default()));
    let req = req
        .body(body)
        .map_err(|e| Error::Request(format!("{uri}: {e}")))?;
    let (status, bytes) = exchange(http, req, limit, MAX_ANSWER, |why| Error::Unreachable {
        service: "Google OAuth",
        endpoint: endpoint.clone(),
        why,
    })
    .await?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if (200..300).contains(&status) {
        return Ok(text);
    }
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    Err(Error::Api {
        service: "Google OAuth",
        action: "token".into(),
        status,
        code: answer["error"].as_str().unwrap_or("").to_owned(),
        message: answer["error_description"]
            .as_str()
            .map_or_else(|| text.chars().take(200).collect(), str::to_owned),
        request_id: None,
    })
}

/// A credentials file: a service account's key, or a user's refresh
/// token; and the project it names.
fn read_file(path: &Path) -> Result<(How, Option<String>), String> {
    let at = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the Google credentials file {at}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("the Google credentials file {at} is not JSON: {e}"))?;
    let field = |k: &str| v[k].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let need = |k: &str| field(k).ok_or_else(|| format!("{at} has no `{k}`"));
    let token_uri = field("token_uri").unwrap_or_else(|| TOKEN_URI.into());
    match v["type"].as_str() {
        Some("service_account") => {
            let key = pem_pkcs8(&need("private_key")?)
                .ok_or_else(|| format!("{at}: `private_key` is not a PEM private key"))?;
            ring::signature::RsaKeyPair::from_pkcs8(&key)
                .map_err(|e| format!("{at}: `private_key` is not an RSA key: {e}"))?;
            Ok((
                How::ServiceAccount {
                    email: need("client_email")?,
                    key,
                    token_uri,
                },
                field("project_id"),
            ))
        }
        Some("authorized_user") => Ok((
            How::AuthorizedUser {
                client_id: need("client_id")?,
                client_secret: need("client_secret")?,
                refresh_token: need("refresh_token")?,
                token_uri,
            },
            // Its `quota_project_id` bills quota; it is not the project
            // (Google's libraries take `gcloud`'s for a user).
            None,
        )),
        other => Err(format!(
            "{at} holds credentials of type `{}`, which skyc does not use: give a service \
             account's key or `gcloud auth application-default login`'s file",
            other.unwrap_or("none")
        )),
    }
}

/// The DER bytes of a PEM `PRIVATE KEY` block.
fn pem_pkcs8(pem: &str) -> Option<Vec<u8>> {
    let body = pem
        .split("-----BEGIN PRIVATE KEY-----")
        .nth(1)?
        .split("-----END PRIVATE KEY-----")
        .next()?;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD.decode(b64).ok()
}

/// The project of `gcloud`'s active configuration under `config`.
fn gcloud_project(config: &Path) -> Option<String> {
    let active = var("CLOUDSDK_ACTIVE_CONFIG_NAME")
        .or_else(|| {
            std::fs::read_to_string(config.join("active_config"))
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "default".into());
    let text = std::fs::read_to_string(
        config
            .join("configurations")
            .join(format!("config_{active}")),
    )
    .ok()?;
    let mut core = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            core = line == "[core]";
        } else if core
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == "project"
            && !v.trim().is_empty()
        {
            return Some(v.trim().to_owned());
        }
    }
    None
}

/// The JWT a service account signs to ask `token_uri` for a token, valid
/// an hour from `now` (Unix time).
fn jwt(email: &str, key: &[u8], token_uri: &str, now: u64) -> Result<String, Error> {
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = serde_json::json!({
        "iss": email,
        "scope": SCOPE,
        "aud": token_uri,
        "iat": now,
        "exp": now + 3600,
    });
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{claims}");
    let bad = |why: String| Error::Request(format!("the service account's JWT: {why}"));
    let pair = ring::signature::RsaKeyPair::from_pkcs8(key).map_err(|e| bad(e.to_string()))?;
    let mut sig = vec![0; pair.public().modulus_len()];
    pair.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut sig,
    )
    .map_err(|e| bad(e.to_string()))?;
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::KeyPair;

    /// A throwaway RSA key made for these tests (`openssl genpkey
    /// -algorithm RSA -pkeyopt rsa_keygen_bits:2048`), no account's.
    const TEST_KEY: &str = include_str!("testdata/test-key.pem");

    #[test]
    fn a_service_accounts_jwt_is_signed_by_its_key_for_the_token_endpoint() {
        let key = pem_pkcs8(TEST_KEY).unwrap();
        let token = jwt("sa@p.iam.gserviceaccount.com", &key, TOKEN_URI, 1_000).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(
            (
                claims["iss"].as_str(),
                claims["aud"].as_str(),
                claims["scope"].as_str(),
                claims["exp"].as_u64()
            ),
            (
                Some("sa@p.iam.gserviceaccount.com"),
                Some(TOKEN_URI),
                Some(SCOPE),
                Some(4_600)
            )
        );
        let pair = ring::signature::RsaKeyPair::from_pkcs8(&key).unwrap();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            pair.public_key().as_ref().to_vec(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        public.verify(signed.as_bytes(), &sig).unwrap();
        // Another message does not verify with this signature.
        assert!(public.verify(b"other", &sig).is_err());
    }

    #[test]
    fn credential_files_are_read_as_googles_libraries_read_them() {
        let dir = std::env::temp_dir().join(format!("skyc-gcp-cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sa = dir.join("sa.json");
        std::fs::write(
            &sa,
            serde_json::json!({
                "type": "service_account",
                "client_email": "sa@p.iam.gserviceaccount.com",
                "private_key": TEST_KEY,
                "project_id": "proj-a",
            })
            .to_string(),
        )
        .unwrap();
        let (how, project) = read_file(&sa).unwrap();
        assert!(matches!(how, How::ServiceAccount { ref token_uri, .. } if token_uri == TOKEN_URI));
        assert_eq!(project.as_deref(), Some("proj-a"));
        let user = dir.join("user.json");
        std::fs::write(
            &user,
            r#"{"type": "authorized_user", "client_id": "c", "client_secret": "s",
                "refresh_token": "r", "quota_project_id": "proj-b"}"#,
        )
        .unwrap();
        let (how, project) = read_file(&user).unwrap();
        assert!(
            matches!(how, How::AuthorizedUser { ref refresh_token, .. } if refresh_token == "r")
        );
        // A quota project is not where buckets are made.
        assert_eq!(project, None);
        let other = dir.join("other.json");
        std::fs::write(&other, r#"{"type": "external_account"}"#).unwrap();
        assert!(read_file(&other).unwrap_err().contains("external_account"));
        std::fs::write(
            &other,
            r#"{"type": "service_account", "client_email": "e", "private_key": "x"}"#,
        )
        .unwrap();
        assert!(
            read_file(&other)
                .unwrap_err()
                .contains("not a PEM private key")
        );
        assert!(
            read_file(&dir.join("none.json"))
                .unwrap_err()
                .contains("cannot read")
        );
        // gcloud's active configuration names the project.
        std::fs::create_dir_all(dir.join("configurations")).unwrap();
        std::fs::write(dir.join("active_config"), "work\n").unwrap();
        std::fs::write(
            dir.join("configurations/config_work"),
            "[auth]\naccount = a@b\n[core]\nproject = proj-c\n",
        )
        .unwrap();
        assert_eq!(gcloud_project(&dir).as_deref(), Some("proj-c"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
