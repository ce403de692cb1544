//! Every credential source, got as a run gets it (`Access::from_env`,
//! then the run's `Keeper`), and EC2 then called with what it gave.
//!
//! - STS (`AssumeRole`, `AssumeRoleWithWebIdentity`) and EC2 are moto's
//!   server (SKYC_MOTO_ENDPOINT), reached through a recorder on loopback
//!   that forwards each request and notes the key that signed it, so a
//!   test sees which credentials each call carried. moto takes any
//!   signature: that EC2 *accepts* a role's credentials is not shown,
//!   only that they are the ones sent.
//! - IAM Identity Center and the instance metadata service are
//!   stand-ins written here, not AWS: a portal that serves
//!   `GetRoleCredentials` (`GET /federation/credentials`) for the bearer
//!   token the AWS CLI's cache holds, and an IMDSv2 endpoint (a session
//!   token from `PUT /latest/api/token`, required by every `GET`) reached
//!   through `AWS_EC2_METADATA_SERVICE_ENDPOINT`; likewise a container
//!   credentials endpoint. They do not show the real services' other
//!   behaviour (the SSO token's refresh through SSO-OIDC, IMDS hop
//!   limits, throttling).
//!
//! The SDK's providers read the process's environment, so each test
//! runs its body in a child process of this test binary with the
//! environment it needs ([`in_child`]).

use crate::aws::control::ops;
use crate::aws::credentials::{Access, Keeper, NodeCredentials, REFRESH_BEFORE, Source, Step};
use crate::aws::ec2::client::{Ec2, Tuning};
use crate::aws::ec2::sigv4::Credentials;
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The variable that tells a child which test body to run.
const CHILD: &str = "SKYC_CREDENTIALS_CHILD";

/// Whether this process is the child that runs `test`'s body.
fn child(test: &str) -> bool {
    std::env::var(CHILD).as_deref() == Ok(test)
}

/// Runs `test` in a child process of this test binary whose environment
/// is only `PATH` and `env` (the SDK's providers read the process's own),
/// where [`child`] tells it to run its body; fails when that fails.
fn in_child(test: &str, env: &[(&str, String)]) -> String {
    let name = format!("aws::tests::credentials::{test}");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env(CHILD, test);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed:\n{text}");
    // The child ran the test (a filter matching none passes too).
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
    text
}

/// The child's scratch directory (its HOME).
fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap())
}

/// The stand-in EC2, or `None` (after a loud message) when there is none
/// and none is required.
fn moto() -> Option<String> {
    match std::env::var("SKYC_MOTO_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            assert!(
                std::env::var_os("SKYC_MOTO_REQUIRED").is_none(),
                "SKYC_MOTO_REQUIRED is set but SKYC_MOTO_ENDPOINT is not"
            );
            eprintln!(
                "!!! SKIPPED: no EC2 stand-in (SKYC_MOTO_ENDPOINT unset); scripts/test starts one (scripts/moto)"
            );
            None
        }
    }
}

/// One HTTP request as a server on loopback saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
    /// What was answered.
    answer: String,
}

impl Seen {
    /// The key id that signed it (`None`: unsigned).
    fn key(&self) -> Option<String> {
        let auth = self.headers.get("authorization")?;
        let cred = auth.split("Credential=").nth(1)?;
        Some(cred.split('/').next()?.to_owned())
    }

    /// The service of its signature's scope (`ec2`, `sts`).
    fn service(&self) -> Option<String> {
        let auth = self.headers.get("authorization")?;
        let cred = auth.split("Credential=").nth(1)?;
        Some(cred.split('/').nth(3)?.to_owned())
    }

    /// A form parameter of its body.
    fn param(&self, name: &str) -> Option<String> {
        self.body.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| decode(v))
        })
    }

    /// An XML element's text in the answer.
    fn answered(&self, tag: &str) -> Option<String> {
        let start = self.answer.find(&format!("<{tag}>"))? + tag.len() + 2;
        let end = self.answer[start..].find(&format!("</{tag}>"))? + start;
        Some(self.answer[start..end].to_owned())
    }
}

fn decode(s: &str) -> String {
    let bytes = s.replace('+', " ").into_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(&bytes[i + 1..i + 3]), 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An answer: status, content type (and any header lines after it),
/// body.
type Answer = (u16, &'static str, String);

/// A server on loopback, one request per connection, that records every
/// request and answers with `handle`.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(handle: impl Fn(&Seen) -> Answer + Send + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Some(mut req) = read_request(&stream) else {
                    continue;
                };
                let (status, content_type, body) = handle(&req);
                req.answer = body.clone();
                log.lock().unwrap().push(req);
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Server { url, seen }
    }

    /// A recorder in front of `upstream` (moto): each request forwarded
    /// as it came, its answer passed back.
    fn recorder(upstream: &str) -> Server {
        let host = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        Server::start(move |req| forward(&host, req))
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        answer: String::new(),
    })
}

fn forward(host: &str, req: &Seen) -> Answer {
    let mut up = TcpStream::connect(host).unwrap();
    let mut head = format!("{} {} HTTP/1.1\r\n", req.method, req.path);
    for (k, v) in &req.headers {
        if k != "connection" {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("connection: close\r\n\r\n");
    up.write_all(head.as_bytes()).unwrap();
    up.write_all(req.body.as_bytes()).unwrap();
    let mut answer = String::new();
    up.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(502);
    (status, "text/xml", body.to_owned())
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("skyc-cred-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const REGION: &str = "us-east-1";

/// `Access::from_env` and a keeper of it, as `skyc run` and then the
/// supervisor make them.
fn from_env() -> (Access, Keeper) {
    let (access, _) = Access::from_env().unwrap_or_else(|e| panic!("{e}"));
    (access.clone(), Keeper::new(access, REGION.into()))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn used(step: Step) -> Credentials {
    match step {
        Step::Use(c) => c,
        other => panic!("no new credentials: {other:?}"),
    }
}

/// One EC2 call (`DescribeInstances`) signed with `credentials`.
fn call_ec2(rt: &tokio::runtime::Runtime, access: &Access, credentials: Credentials) {
    let settings = crate::aws::ec2::config::Settings {
        profile: access.profile.clone(),
        credentials,
        credentials_source: "the test".into(),
        region: None,
        endpoint: access.endpoint.clone(),
    };
    let ec2 = Ec2::new(&settings, Some(REGION), Tuning::default()).unwrap();
    rt.block_on(ops::instances(&ec2, "credentials-test"))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The key ids of the recorder's EC2 calls.
fn ec2_keys(r: &Server) -> Vec<String> {
    r.seen()
        .iter()
        .filter(|s| s.service().as_deref() == Some("ec2"))
        .filter_map(Seen::key)
        .collect()
}

/// A `credential_process` that gives a new key each time it runs
/// (`AKPROC1`, `AKPROC2`...), valid for `valid_s` seconds, and fails
/// with a message while `broken` exists; it logs each secret it gives.
fn process_script(dir: &Path, valid_s: u64) -> PathBuf {
    let script = dir.join("creds.sh");
    write(
        &script,
        &format!(
            r#"#!/bin/sh
set -e
d={dir}
if [ -e "$d/broken" ]; then echo "the identity broker says: session revoked" >&2; exit 3; fi
n=$(( $(cat "$d/count" 2>/dev/null || echo 0) + 1 ))
echo $n > "$d/count"
exp=$(date -u -d "@$(( $(date +%s) + {valid_s} ))" +%Y-%m-%dT%H:%M:%SZ)
echo "procsecret$n-$$" >> "$d/secrets"
echo "proctoken$n-$$" >> "$d/secrets"
printf '{{"Version": 1, "AccessKeyId": "AKPROC%s", "SecretAccessKey": "procsecret%s-%s", "SessionToken": "proctoken%s-%s", "Expiration": "%s"}}\n' $n $n $$ $n $$ "$exp"
"#,
            dir = dir.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn count(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("count"))
        .map(|c| c.trim().parse().unwrap())
        .unwrap_or(0)
}

#[test]
fn credential_process_credentials_sign_ec2_and_are_renewed_before_they_expire() {
    const TEST: &str = "credential_process_credentials_sign_ec2_and_are_renewed_before_they_expire";
    if child(TEST) {
        let (access, mut keeper) = from_env();
        assert_eq!(access.source, Source::Profile);
        let rt = rt();
        let now = SystemTime::now();
        let first = used(rt.block_on(keeper.step(now)));
        assert_eq!(first.access_key_id, "AKPROC1");
        assert!(first.session_token.is_some());
        call_ec2(&rt, &access, first);
        // Valid for an hour: kept, the process not run again.
        assert_eq!(rt.block_on(keeper.step(now)), Step::Keep);
        assert_eq!(count(&home()), 1);
        // Less than REFRESH_BEFORE left: asked again, before expiry.
        let later = now + Duration::from_secs(3600) - REFRESH_BEFORE + Duration::from_secs(5);
        let second = used(rt.block_on(keeper.step(later)));
        assert_eq!(second.access_key_id, "AKPROC2");
        call_ec2(&rt, &access, second);
        return;
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("process");
    let rec = Server::recorder(&moto);
    let script = process_script(&dir, 3600);
    write(
        &dir.join(".aws/config"),
        &format!(
            "[profile tool]\ncredential_process = {}\nendpoint_url = {}\n",
            script.display(),
            rec.url
        ),
    );
    in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_PROFILE", "tool".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ],
    );
    assert_eq!(ec2_keys(&rec), ["AKPROC1", "AKPROC2"]);
}

#[test]
fn a_failed_refresh_is_an_outage_that_says_what_to_renew() {
    const TEST: &str = "a_failed_refresh_is_an_outage_that_says_what_to_renew";
    if child(TEST) {
        let dir = home();
        let (_, mut keeper) = from_env();
        let rt = rt();
        let now = SystemTime::now();
        used(rt.block_on(keeper.step(now)));
        write(&dir.join("broken"), "");
        // Due, but the held ones are still valid: a warning only.
        let due = now + Duration::from_secs(3600) - REFRESH_BEFORE + Duration::from_secs(5);
        let Step::Warn(w) = rt.block_on(keeper.step(due)) else {
            panic!("not a warning")
        };
        assert!(
            w.starts_with("cannot renew the run's AWS credentials ("),
            "{w}"
        );
        assert!(w.contains("session revoked"), "{w}");
        // Expired and not renewed: the run is in an outage that names the
        // source, its error and what to renew.
        let expired = now + Duration::from_secs(3601);
        let Step::Outage(o) = rt.block_on(keeper.step(expired)) else {
            panic!("not an outage")
        };
        assert!(
            o.starts_with(&format!(
                "cannot get the run's AWS credentials from profile `tool`'s \
                 credential_process `{}`: ",
                dir.join("creds.sh").display()
            )),
            "{o}"
        );
        assert!(o.contains("session revoked"), "{o}");
        assert!(
            o.contains(
                "To renew: make profile `tool`'s credential_process give credentials \
                 again. Until then the run's instances are neither followed nor terminated"
            ),
            "{o}"
        );
        // Renewed: the next pass has credentials again.
        std::fs::remove_file(dir.join("broken")).unwrap();
        assert_eq!(
            used(rt.block_on(keeper.step(expired))).access_key_id,
            "AKPROC2"
        );
        // EC2 refuses them and the source gives the same again: an outage
        // with EC2's word.
        std::fs::write(
            dir.join(".aws/config"),
            "[profile tool]\naws_access_key_id = AKSTATIC\naws_secret_access_key = s\n",
        )
        .unwrap();
        keeper.refused("EC2 refused DescribeInstances: AuthFailure".into());
        assert_eq!(
            used(rt.block_on(keeper.step(expired))).access_key_id,
            "AKSTATIC"
        );
        keeper.refused("EC2 refused DescribeInstances: AuthFailure".into());
        let Step::Outage(o) = rt.block_on(keeper.step(expired)) else {
            panic!("not an outage")
        };
        assert!(
            o.starts_with(
                "EC2 refused DescribeInstances: AuthFailure. The run's credentials, from \
                 the keys in "
            ),
            "{o}"
        );
        assert!(
            o.contains("are the same when asked again: renew the keys in"),
            "{o}"
        );
        return;
    }
    let dir = scratch("outage");
    let script = process_script(&dir, 3600);
    write(
        &dir.join(".aws/config"),
        &format!(
            "[profile tool]\ncredential_process = {}\n",
            script.display()
        ),
    );
    in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_PROFILE", "tool".into()),
        ],
    );
}

/// Credentials as the stand-ins give them, valid for an hour: the JSON
/// of IMDS and container endpoints, and of the SSO portal.
fn stand_in_credentials(key: &str) -> (String, String) {
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    (
        format!(
            r#"{{"Code": "Success", "LastUpdated": "2026-01-01T00:00:00Z", "Type": "AWS-HMAC", "AccessKeyId": "{key}", "SecretAccessKey": "standin-secret", "Token": "standin-token", "Expiration": "{}"}}"#,
            expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
        format!(
            r#"{{"roleCredentials": {{"accessKeyId": "{key}", "secretAccessKey": "standin-secret", "sessionToken": "standin-token", "expiration": {}}}}}"#,
            expires.as_millisecond()
        ),
    )
}

/// The calls of STS action `action` the recorder saw.
fn assumed(r: &Server, action: &str) -> Vec<Seen> {
    r.seen()
        .into_iter()
        .filter(|s| s.param("Action").as_deref() == Some(action))
        .collect()
}

#[test]
fn an_assumed_roles_credentials_sign_ec2_never_the_source_profiles() {
    const TEST: &str = "an_assumed_roles_credentials_sign_ec2_never_the_source_profiles";
    if child(TEST) {
        let (access, mut keeper) = from_env();
        let rt = rt();
        let creds = used(rt.block_on(keeper.step(SystemTime::now())));
        assert!(creds.session_token.is_some());
        call_ec2(&rt, &access, creds);
        return;
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("role");
    let rec = Server::recorder(&moto);
    write(
        &dir.join(".aws/credentials"),
        "[base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = basesecret\n",
    );
    write(
        &dir.join(".aws/config"),
        &format!(
            "[profile admin]\nrole_arn = arn:aws:iam::123456789012:role/admin\n\
             source_profile = base\nexternal_id = ext-42\nduration_seconds = 900\n\
             role_session_name = skyc-test\nregion = us-east-1\nendpoint_url = {url}\n\
             [profile chained]\nrole_arn = arn:aws:iam::123456789012:role/deploy\n\
             source_profile = admin\nendpoint_url = {url}\n",
            url = rec.url
        ),
    );
    in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_PROFILE", "chained".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ],
    );
    let calls = assumed(&rec, "AssumeRole");
    assert_eq!(calls.len(), 2, "{calls:#?}");
    // The first role with the source profile's keys and the profile's
    // settings.
    let (admin, deploy) = (&calls[0], &calls[1]);
    assert_eq!(admin.key().as_deref(), Some("AKIDBASE"));
    assert_eq!(admin.service().as_deref(), Some("sts"));
    assert_eq!(
        admin.param("RoleArn").as_deref(),
        Some("arn:aws:iam::123456789012:role/admin")
    );
    assert_eq!(admin.param("ExternalId").as_deref(), Some("ext-42"));
    assert_eq!(admin.param("DurationSeconds").as_deref(), Some("900"));
    assert_eq!(admin.param("RoleSessionName").as_deref(), Some("skyc-test"));
    // The second with the first's, then EC2 with the second's only.
    let admin_key = admin.answered("AccessKeyId").unwrap();
    assert_eq!(deploy.key(), Some(admin_key));
    assert_eq!(
        deploy.param("RoleArn").as_deref(),
        Some("arn:aws:iam::123456789012:role/deploy")
    );
    assert!(
        deploy
            .param("RoleSessionName")
            .unwrap()
            .starts_with("skyc-")
    );
    let deploy_key = deploy.answered("AccessKeyId").unwrap();
    assert_eq!(ec2_keys(&rec), [deploy_key]);
}

#[test]
fn web_identity_from_the_environment_through_sts() {
    const TEST: &str = "web_identity_from_the_environment_through_sts";
    if child(TEST) {
        let token = PathBuf::from(std::env::var("AWS_WEB_IDENTITY_TOKEN_FILE").unwrap());
        let (access, mut keeper) = from_env();
        assert_eq!(
            access.source,
            Source::WebIdentity {
                token_file: token.clone(),
                role_arn: "arn:aws:iam::123456789012:role/pod".into(),
                session_name: Some("pod-session".into()),
            }
        );
        let rt = rt();
        let now = SystemTime::now();
        let creds = used(rt.block_on(keeper.step(now)));
        call_ec2(&rt, &access, creds);
        // The token file is read again for the next exchange (EKS rotates
        // it).
        write(&token, "eyJ.second-token.sig");
        let later = now + Duration::from_secs(3600) - REFRESH_BEFORE + Duration::from_secs(5);
        let renewed = used(rt.block_on(keeper.step(later)));
        call_ec2(&rt, &access, renewed);
        return;
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("web");
    let rec = Server::recorder(&moto);
    let token = dir.join("token");
    write(&token, "eyJ.first-token.sig");
    in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/pod".into()),
            ("AWS_ROLE_SESSION_NAME", "pod-session".into()),
            ("AWS_ENDPOINT_URL", rec.url.clone()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ],
    );
    let calls = assumed(&rec, "AssumeRoleWithWebIdentity");
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(calls[0].key(), None, "unsigned");
    assert_eq!(
        calls[0].param("WebIdentityToken").as_deref(),
        Some("eyJ.first-token.sig")
    );
    assert_eq!(
        calls[1].param("WebIdentityToken").as_deref(),
        Some("eyJ.second-token.sig")
    );
    assert_eq!(
        calls[0].param("RoleArn").as_deref(),
        Some("arn:aws:iam::123456789012:role/pod")
    );
    assert_eq!(
        calls[0].param("RoleSessionName").as_deref(),
        Some("pod-session")
    );
    let given: Vec<String> = calls
        .iter()
        .map(|c| c.answered("AccessKeyId").unwrap())
        .collect();
    assert_eq!(ec2_keys(&rec), given);
}

/// The AWS CLI's SSO cache file of session `name` under `home`: named by
/// the SHA-1 of the name.
fn sso_cache(home: &Path, name: &str) -> PathBuf {
    let hash = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, name.as_bytes());
    home.join(format!(
        ".aws/sso/cache/{}.json",
        crate::aws::ec2::sigv4::hex(hash.as_ref())
    ))
}

#[test]
fn iam_identity_center_through_a_stand_in_portal_with_the_clis_cached_token() {
    const TEST: &str = "iam_identity_center_through_a_stand_in_portal_with_the_clis_cached_token";
    if child(TEST) {
        let (access, mut keeper) = from_env();
        let rt = rt();
        let creds = used(rt.block_on(keeper.step(SystemTime::now())));
        assert_eq!(creds.access_key_id, "AKSSO");
        assert_eq!(creds.session_token.as_deref(), Some("standin-token"));
        call_ec2(&rt, &access, creds);
        // Logged out (the cached token expired, with nothing to refresh
        // it): an outage that says to log in again.
        write(
            &sso_cache(&home(), "corp"),
            r#"{"startUrl": "https://corp.awsapps.com/start", "region": "eu-west-1", "accessToken": "cached-access-token", "expiresAt": "2020-01-01T00:00:00Z"}"#,
        );
        let (_, mut keeper) = from_env();
        let Step::Outage(o) = rt.block_on(keeper.step(SystemTime::now())) else {
            panic!("not an outage")
        };
        assert!(
            o.starts_with(
                "cannot get the run's AWS credentials from profile `dev`'s IAM Identity \
                 Center role Dev in account 123456789012: "
            ),
            "{o}"
        );
        assert!(
            o.contains("To renew: log in again: aws sso login --sso-session corp."),
            "{o}"
        );
        return;
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("sso");
    let rec = Server::recorder(&moto);
    // The stand-in portal: GetRoleCredentials for the cached token only.
    let portal = Server::start(|req| {
        let ok = req.method == "GET"
            && req.path.starts_with("/federation/credentials?")
            && req.path.contains("account_id=123456789012")
            && req.path.contains("role_name=Dev")
            && req
                .headers
                .get("x-amz-sso_bearer_token")
                .map(String::as_str)
                == Some("cached-access-token");
        if ok {
            (200, "application/json", stand_in_credentials("AKSSO").1)
        } else {
            (
                401,
                "application/json",
                r#"{"message": "Session token not found or invalid"}"#.into(),
            )
        }
    });
    // The cache after `aws sso login --sso-session corp`.
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(8);
    write(
        &sso_cache(&dir, "corp"),
        &format!(
            r#"{{"startUrl": "https://corp.awsapps.com/start", "region": "eu-west-1", "accessToken": "cached-access-token", "expiresAt": "{}"}}"#,
            expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
    );
    write(
        &dir.join(".aws/config"),
        &format!(
            "[profile dev]\nsso_session = corp\nsso_account_id = 123456789012\n\
             sso_role_name = Dev\nregion = us-east-1\nendpoint_url = {}\n\
             [sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\n\
             sso_region = eu-west-1\nsso_registration_scopes = sso:account:access\n",
            rec.url
        ),
    );
    in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_PROFILE", "dev".into()),
            ("AWS_ENDPOINT_URL_SSO", portal.url.clone()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ],
    );
    assert_eq!(portal.seen().len(), 1, "{:#?}", portal.seen());
    assert_eq!(ec2_keys(&rec), ["AKSSO"]);
}

#[test]
fn the_instances_role_through_a_stand_in_imdsv2() {
    const TEST: &str = "the_instances_role_through_a_stand_in_imdsv2";
    if child(TEST) {
        let (access, mut keeper) = from_env();
        assert_eq!(
            access.source,
            Source::InstanceMetadata {
                endpoint: std::env::var("AWS_EC2_METADATA_SERVICE_ENDPOINT").ok()
            }
        );
        let rt = rt();
        let creds = used(rt.block_on(keeper.step(SystemTime::now())));
        assert_eq!(creds.access_key_id, "AKIMDS");
        call_ec2(&rt, &access, creds);
        return;
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("imds");
    let rec = Server::recorder(&moto);
    // The stand-in IMDSv2: a session token, then only requests carrying it.
    let imds = Server::start(|req| {
        const TOKEN: &str = "imds-session-token";
        let has = req
            .headers
            .get("x-aws-ec2-metadata-token")
            .map(String::as_str)
            == Some(TOKEN);
        match (req.method.as_str(), req.path.as_str()) {
            ("PUT", "/latest/api/token")
                if req
                    .headers
                    .contains_key("x-aws-ec2-metadata-token-ttl-seconds") =>
            {
                // The token's TTL comes back as a header, as IMDS sends it.
                (
                    200,
                    "text/plain\r\nX-Aws-Ec2-Metadata-Token-Ttl-Seconds: 21600",
                    TOKEN.into(),
                )
            }
            (_, _) if !has => (401, "text/plain", String::new()),
            ("GET", "/latest/meta-data/iam/security-credentials/") => {
                (200, "text/plain", "skyc-node-role".into())
            }
            ("GET", "/latest/meta-data/iam/security-credentials/skyc-node-role") => {
                (200, "text/plain", stand_in_credentials("AKIMDS").0)
            }
            _ => (404, "text/plain", String::new()),
        }
    });
    in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url.clone()),
            ("AWS_ENDPOINT_URL_EC2", rec.url.clone()),
        ],
    );
    let seen = imds.seen();
    assert_eq!(seen[0].method, "PUT", "{seen:#?}");
    assert!(
        seen.iter()
            .all(|s| s.method == "PUT" || s.headers.contains_key("x-aws-ec2-metadata-token")),
        "IMDSv2 only: {seen:#?}"
    );
    assert_eq!(ec2_keys(&rec), ["AKIMDS"]);
}

#[test]
fn container_credentials_through_a_stand_in_endpoint() {
    const TEST: &str = "container_credentials_through_a_stand_in_endpoint";
    if child(TEST) {
        let (access, mut keeper) = from_env();
        assert_eq!(access.source, Source::Container);
        let creds = used(rt().block_on(keeper.step(SystemTime::now())));
        assert_eq!(creds.access_key_id, "AKPOD");
        return;
    }
    let dir = scratch("container");
    let endpoint = Server::start(|req| {
        if req.headers.get("authorization").map(String::as_str) == Some("pod-identity-token") {
            (200, "application/json", stand_in_credentials("AKPOD").0)
        } else {
            (403, "application/json", "{}".into())
        }
    });
    let token = dir.join("token");
    write(&token, "pod-identity-token");
    in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                format!("{}/v1/credentials", endpoint.url),
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                token.display().to_string(),
            ),
        ],
    );
    assert_eq!(endpoint.seen()[0].path, "/v1/credentials");
}

/// A task's session policy, as the spec gives it: bucket `data`.
const POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Sid":"SkycMountedBuckets","Effect":"Allow","Action":["s3:ListBucket"],"Resource":["arn:aws:s3:::data"]},{"Sid":"SkycMountedObjects","Effect":"Allow","Action":["s3:GetObject"],"Resource":["arn:aws:s3:::data/*"]}]}"#;

/// In a child: the run's credentials, then what its nodes are given for
/// a task that mounts `data` and one that mounts nothing, at each of
/// `after` (seconds from now). Prints, each time, the key the first
/// task's nodes get (`delivered KEY`), what `status` says of it
/// (`says ...`) and each error (`error ...`), for the parent.
fn deliver_in_child(after: &[u64]) {
    let (_, mut keeper) = from_env();
    let rt = rt();
    used(rt.block_on(keeper.step(SystemTime::now())));
    // On a line of its own: the harness's `test NAME ... ` has none.
    println!(
        "\nrun {}",
        keeper.held().unwrap().0.credentials.access_key_id
    );
    let mut nodes = NodeCredentials::new("g", vec![Some(POLICY.to_owned()), None]);
    let start = SystemTime::now();
    for s in after {
        let now = start + Duration::from_secs(*s);
        let (delivered, errors) = rt.block_on(nodes.step(&keeper, now));
        assert!(delivered[1].is_none(), "{delivered:?}");
        let d = delivered[0].clone().expect("a delivery");
        let doc: serde_json::Value =
            serde_json::from_str(d.document.as_deref().expect("credentials")).unwrap();
        // As `credential_process` prints them, with an expiry an SDK
        // renews at.
        assert_eq!(doc["Version"], 1);
        assert!(doc["SessionToken"].is_string() && doc["Expiration"].is_string());
        println!("delivered {}", doc["AccessKeyId"].as_str().unwrap());
        println!("says {}", d.says);
        for e in errors {
            println!("error {e}");
        }
    }
}

/// The value of the child's line `prefix ...`.
fn printed<'t>(text: &'t str, prefix: &str) -> Vec<&'t str> {
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
        .collect()
}

/// A profile with an IAM user's keys, STS at `url`.
fn long_term_keys(dir: &Path, url: &str) {
    write(
        &dir.join(".aws/credentials"),
        "[default]\naws_access_key_id = AKIDBASE\naws_secret_access_key = basesecret\n",
    );
    write(
        &dir.join(".aws/config"),
        &format!("[default]\nregion = us-east-1\nendpoint_url = {url}\n"),
    );
}

#[test]
fn an_iam_users_keys_reach_nodes_narrowed_by_a_federation_token() {
    const TEST: &str = "an_iam_users_keys_reach_nodes_narrowed_by_a_federation_token";
    if child(TEST) {
        return deliver_in_child(&[0]);
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("federation");
    let rec = Server::recorder(&moto);
    long_term_keys(&dir, &rec.url);
    let text = in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ],
    );
    let calls = assumed(&rec, "GetFederationToken");
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let call = &calls[0];
    assert_eq!(call.key().as_deref(), Some("AKIDBASE"));
    assert_eq!(call.param("Policy").as_deref(), Some(POLICY));
    assert_eq!(call.param("Name").as_deref(), Some("skyc-g"));
    assert_eq!(call.param("DurationSeconds").as_deref(), Some("3600"));
    // The nodes hold the federated user's credentials, never the keys.
    let key = call.answered("AccessKeyId").unwrap();
    assert_eq!(printed(&text, "delivered"), [key.as_str()], "{text}");
    assert_ne!(key, "AKIDBASE");
    assert_eq!(
        printed(&text, "says"),
        ["AWS credentials narrowed to s3://data (STS GetFederationToken), short-lived"],
        "{text}"
    );
    assert!(printed(&text, "error").is_empty(), "{text}");
}

#[test]
fn a_roles_nodes_get_it_again_with_the_session_policy() {
    const TEST: &str = "a_roles_nodes_get_it_again_with_the_session_policy";
    if child(TEST) {
        return deliver_in_child(&[0]);
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("role-narrowed");
    let rec = Server::recorder(&moto);
    write(
        &dir.join(".aws/credentials"),
        "[base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = basesecret\n",
    );
    write(
        &dir.join(".aws/config"),
        &format!(
            "[profile deploy]\nrole_arn = arn:aws:iam::123456789012:role/deploy\n\
             source_profile = base\nregion = us-east-1\nendpoint_url = {}\n",
            rec.url
        ),
    );
    let text = in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_PROFILE", "deploy".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ],
    );
    // The run's role as the profile says, then the nodes' with the
    // policy: both from the source profile's keys.
    let calls = assumed(&rec, "AssumeRole");
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for c in &calls {
        assert_eq!(c.key().as_deref(), Some("AKIDBASE"));
        assert_eq!(
            c.param("RoleArn").as_deref(),
            Some("arn:aws:iam::123456789012:role/deploy")
        );
    }
    assert_eq!(calls[0].param("Policy"), None);
    assert_eq!(calls[1].param("Policy").as_deref(), Some(POLICY));
    let run = calls[0].answered("AccessKeyId").unwrap();
    let nodes = calls[1].answered("AccessKeyId").unwrap();
    assert_eq!(printed(&text, "run"), [run.as_str()], "{text}");
    assert_eq!(printed(&text, "delivered"), [nodes.as_str()], "{text}");
    assert_ne!(run, nodes);
    assert_eq!(
        printed(&text, "says"),
        ["AWS credentials narrowed to s3://data (the role's session policy), short-lived"],
        "{text}"
    );
    assert!(assumed(&rec, "GetFederationToken").is_empty());
}

#[test]
fn credentials_sts_cannot_narrow_are_the_runs_own_and_say_so() {
    const TEST: &str = "credentials_sts_cannot_narrow_are_the_runs_own_and_say_so";
    if child(TEST) {
        return deliver_in_child(&[0]);
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("unnarrowed");
    let rec = Server::recorder(&moto);
    let script = process_script(&dir, 3600);
    write(
        &dir.join(".aws/config"),
        &format!(
            "[default]\ncredential_process = {}\nregion = us-east-1\nendpoint_url = {}\n",
            script.display(),
            rec.url
        ),
    );
    let text = in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ],
    );
    assert_eq!(printed(&text, "delivered"), ["AKPROC1"], "{text}");
    assert_eq!(
        printed(&text, "says"),
        [
            "the run's own AWS credentials (a credential_process's: STS cannot narrow them \
             to s3://data), renewed with them"
        ],
        "{text}"
    );
    assert!(rec.seen().is_empty(), "{:#?}", rec.seen());
}

#[test]
fn a_refused_federation_gives_nodes_a_session_token_never_the_keys() {
    const TEST: &str = "a_refused_federation_gives_nodes_a_session_token_never_the_keys";
    if child(TEST) {
        return deliver_in_child(&[0, 1, 301]);
    }
    let Some(moto) = moto() else { return };
    let dir = scratch("federation-refused");
    // STS as an IAM user without sts:GetFederationToken finds it.
    let host = moto.trim_start_matches("http://").to_owned();
    let rec = Server::start(move |req| {
        if req.param("Action").as_deref() == Some("GetFederationToken") {
            return (
                403,
                "text/xml",
                "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>\
                 <Message>User: arn:aws:iam::123456789012:user/u is not authorized to \
                 perform: sts:GetFederationToken</Message></Error>\
                 <RequestId>r</RequestId></ErrorResponse>"
                    .to_owned(),
            );
        }
        forward(&host, req)
    });
    long_term_keys(&dir, &rec.url);
    let text = in_child(
        TEST,
        &[
            ("HOME", dir.display().to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ],
    );
    // Asked at once, not a second later (the passes in between), again
    // after 5 minutes; the session token, good for an hour, kept.
    assert_eq!(
        assumed(&rec, "GetFederationToken").len(),
        2,
        "{:#?}",
        rec.seen()
    );
    let tokens = assumed(&rec, "GetSessionToken");
    assert_eq!(tokens.len(), 1, "{:#?}", rec.seen());
    assert_eq!(tokens[0].key().as_deref(), Some("AKIDBASE"));
    let key = tokens[0].answered("AccessKeyId").unwrap();
    assert_eq!(printed(&text, "delivered"), [key.as_str(); 3], "{text}");
    let says = printed(&text, "says");
    assert!(
        says.len() == 3
            && says.iter().all(|s| s == &says[0])
            && says[0].starts_with(
                "short-lived AWS credentials of the run's IAM user (STS GetSessionToken), \
                 not narrowed to s3://data: STS GetFederationToken: "
            )
            && says[0].contains("not authorized to perform: sts:GetFederationToken")
            && says[0].ends_with("tried again every 5 minutes"),
        "{text}"
    );
    let errors = printed(&text, "error");
    assert!(
        errors.len() == 1
            && errors[0]
                .starts_with("cannot narrow the AWS credentials of the nodes that mount s3://data")
            && errors[0]
                .ends_with("they are given a session token of the run's IAM user meanwhile"),
        "{text}"
    );
}
