//! The session policy a node's credentials are narrowed by
//! (`skyc_targets::cloud::session_policy`), held against IAM's
//! evaluation: rclone, with the settings a node mounts with, does in the
//! bucket what a mount does (write, read, list, rename, delete), and is
//! refused the other bucket.
//!
//! The stand-in is a moto server of the test's own
//! (SKYC_MOTO_IAM_ENDPOINT, which scripts/test starts), made to check
//! every request after the set-up against the IAM policies of the key
//! that signed it (`/moto-api/reset-auth`). moto evaluates a user's
//! policies, not a session's, so the policy is the only one of an IAM
//! user here: what STS's intersection with the run's own allows is at
//! most that. moto maps each S3 request to its action and resource as
//! AWS documents them; it does not show conditions, nor rclone's
//! multipart uploads (files past 200 MiB).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::Command;

/// One unsigned request to moto (the set-up, before it checks), signed
/// in appearance for `service`; its status and body.
fn call(endpoint: &str, service: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let host = endpoint.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).unwrap();
    let form = if service == "iam" {
        "content-type: application/x-www-form-urlencoded\r\n"
    } else {
        ""
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\n{form}authorization: AWS4-HMAC-SHA256 \
         Credential=AKIDSETUP/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, \
         Signature=0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_owned())
}

fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| {
            let v: String = v
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("{k}={v}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn element(xml: &str, tag: &str) -> String {
    let start = xml
        .find(&format!("<{tag}>"))
        .unwrap_or_else(|| panic!("{xml}"))
        + tag.len()
        + 2;
    let end = xml[start..].find(&format!("</{tag}>")).unwrap() + start;
    xml[start..end].to_owned()
}

#[test]
fn the_nodes_session_policy_allows_a_mount_its_bucket_and_nothing_else() {
    let Ok(endpoint) = std::env::var("SKYC_MOTO_IAM_ENDPOINT") else {
        assert!(
            std::env::var_os("SKYC_MOTO_REQUIRED").is_none(),
            "SKYC_MOTO_REQUIRED is set but SKYC_MOTO_IAM_ENDPOINT is not"
        );
        eprintln!(
            "!!! SKIPPED: no IAM-checking moto (SKYC_MOTO_IAM_ENDPOINT); scripts/test starts one"
        );
        return;
    };
    if Command::new("rclone").arg("version").output().is_err() {
        assert!(
            std::env::var_os("SKYC_FUSE_REQUIRED").is_none(),
            "SKYC_FUSE_REQUIRED is set but rclone is missing"
        );
        eprintln!("!!! SKIPPED: no rclone");
        return;
    }
    let id = std::process::id();
    let (mine, other, user) = (
        format!("mine-{id}"),
        format!("other-{id}"),
        format!("nodes-{id}"),
    );
    let policy =
        skyc_targets::cloud::session_policy(std::slice::from_ref(&mine), "us-east-1").to_string();
    // The set-up's six requests unchecked, every one after checked.
    let (status, body) = call(&endpoint, "s3", "POST", "/moto-api/reset-auth", "6");
    assert_eq!(status, 200, "{body}");
    for (path, body) in [
        (format!("/{mine}"), ""),
        (format!("/{other}"), ""),
        (format!("/{other}/secret.txt"), "not for the nodes"),
    ] {
        let (status, answer) = call(&endpoint, "s3", "PUT", &path, body);
        assert_eq!(status, 200, "PUT {path}: {answer}");
    }
    let iam = |pairs: &[(&str, &str)]| {
        let mut pairs = pairs.to_vec();
        pairs.push(("Version", "2010-05-08"));
        let (status, answer) = call(&endpoint, "iam", "POST", "/", &form(&pairs));
        assert_eq!(status, 200, "{pairs:?}: {answer}");
        answer
    };
    iam(&[("Action", "CreateUser"), ("UserName", &user)]);
    iam(&[
        ("Action", "PutUserPolicy"),
        ("UserName", &user),
        ("PolicyName", "skyc-nodes"),
        ("PolicyDocument", &policy),
    ]);
    let key = iam(&[("Action", "CreateAccessKey"), ("UserName", &user)]);
    let (key_id, secret) = (
        element(&key, "AccessKeyId"),
        element(&key, "SecretAccessKey"),
    );

    let dir = std::env::temp_dir().join(format!("skyc-policy-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let weights: Vec<u8> = (0..2_000_000u32).map(|i| (i * 17 % 253) as u8).collect();
    std::fs::write(dir.join("w.bin"), &weights).unwrap();
    // rclone as a node runs it: the mount's settings, the narrowed keys.
    let settings = skyc_targets::storage::rclone_settings(
        skyc_targets::storage::Store::S3,
        false,
        Some("us-east-1"),
        Some(&endpoint),
    );
    let rclone = |args: &[&str]| {
        Command::new("rclone")
            .args(args)
            .args(["--retries", "1", "--low-level-retries", "1"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &dir)
            .envs(settings.iter().map(|(k, v)| (*k, v.as_str())))
            .env("AWS_ACCESS_KEY_ID", &key_id)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .output()
            .unwrap()
    };
    let ok = |args: &[&str]| {
        let out = rclone(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "rclone {args:?} was refused:\n{err}");
        out.stdout
    };
    let at = |key: &str| format!(":s3:{mine}/{key}");
    let local = dir.join("w.bin").display().to_string();
    ok(&["copyto", &local, &at("policy/w.bin")]);
    assert!(ok(&["cat", &at("policy/w.bin")]) == weights);
    assert_eq!(ok(&["lsf", &at("policy")]), b"w.bin\n");
    ok(&["moveto", &at("policy/w.bin"), &at("policy/v.bin")]);
    assert_eq!(ok(&["lsf", &at("policy")]), b"v.bin\n");
    ok(&["deletefile", &at("policy/v.bin")]);
    assert_eq!(ok(&["lsf", &at("")]), b"");
    // The other bucket: neither read, listed nor written.
    for args in [
        vec!["cat".to_owned(), format!(":s3:{other}/secret.txt")],
        vec!["lsf".to_owned(), format!(":s3:{other}")],
        vec![
            "copyto".to_owned(),
            local.clone(),
            format!(":s3:{other}/w.bin"),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = rclone(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "rclone {args:?} was allowed");
        // A HEAD's refusal has no body: S3's 403 alone.
        assert!(
            err.contains("AccessDenied") || err.contains("status code: 403"),
            "rclone {args:?}:\n{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
