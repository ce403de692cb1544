//! The scenarios against moto's server on loopback: an EC2 stand-in
//! (PyPI `moto[server]`), not EC2. scripts/test starts it (scripts/moto)
//! and exports SKYC_MOTO_ENDPOINT and SKYC_MOTO_REQUIRED=1: there a
//! missing server fails these tests; a bare `cargo test` without one skips
//! them with a loud message.
//!
//! What moto does not do as EC2 does, and so what these tests do not
//! show: it records a `RunInstances` `ClientToken` but does not
//! deduplicate by it (moto 5.2.5; here a launch is kept single by the
//! reconciler finding the attempt's instance first, on EC2 by the token
//! too); it has no placement groups, no spot interruptions (an instance
//! is terminated out of band instead), no eventual consistency, and it
//! runs no VM.

use super::GROUP;
use super::scenarios::{self, Target};
use crate::aws::control::ops;
use crate::aws::ec2::client::{Ec2, Error, Tuning};
use crate::aws::ec2::config::Settings;
use crate::aws::ec2::sigv4::Credentials;
use crate::reconciler::backoff::Backoff;
use std::time::{Duration, Instant};

fn settings(endpoint: &str) -> Settings {
    // moto takes any credentials; these could sign nothing on AWS.
    Settings {
        profile: "default".into(),
        credentials: Credentials {
            access_key_id: "AKIDSKYCTEST".into(),
            secret_access_key: "skyc-test-secret".into(),
            session_token: None,
        },
        credentials_source: "the test".into(),
        region: None,
        endpoint: Some(endpoint.to_owned()),
    }
}

/// The stand-in, or `None` (after a loud message) when there is none and
/// none is required.
fn moto() -> Option<Target> {
    match std::env::var("SKYC_MOTO_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(Target {
            settings: settings(&e),
            group: GROUP,
            poll: Duration::ZERO,
            deadline: Duration::from_secs(20),
            strict: true,
        }),
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

macro_rules! on_moto {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let Some(t) = moto() else { return };
            t.run(stringify!($name), |t, p, ec2| Box::pin(scenarios::$name(t, p, ec2)));
        }
    )*};
}

on_moto!(
    launches_a_groups_instances_from_the_build,
    a_launch_repeated_is_one_instance,
    a_new_client_finds_the_run_again,
    auxiliaries_end_after_the_primaries_and_the_network_last,
    cancel_terminates_every_instance,
    an_instance_terminated_out_of_band_is_a_lost_node,
    an_instance_stopped_out_of_band_is_a_lost_node,
    refusals_are_clear,
    a_network_left_incomplete_is_completed,
    ssh_access_is_the_runs,
);

macro_rules! pipeline_on_moto {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let Some(t) = moto() else { return };
            t.run_group(stringify!($name), super::PIPELINE, |t, p, ec2| {
                Box::pin(scenarios::$name(t, p, ec2))
            });
        }
    )*};
}

pipeline_on_moto!(
    a_pipelines_steps_run_one_after_another_on_their_own_instances,
    a_failed_step_cancels_the_later_steps_unlaunched,
    cancel_mid_pipeline_terminates_the_running_step,
);

#[test]
fn an_unreachable_endpoint_fails_in_bounded_time() {
    // A port nothing listens on: no stand-in needed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = super::plan(GROUP, "unreachable");
    let tuning = Tuning {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        backoff: Backoff {
            first: Duration::from_millis(10),
            max: Duration::from_millis(50),
            tries: 3,
        },
    };
    let ec2 = Ec2::new(
        &settings(&format!("http://127.0.0.1:{port}")),
        Some(&p.region),
        tuning,
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let e = rt.block_on(ops::world(&ec2, &p)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(&format!(
            "cannot reach the EC2 endpoint http://127.0.0.1:{port}: "
        )),
        "{e}"
    );
}

/// A security group still in use is not deleted: EC2 answers
/// `DependencyViolation` (moto never does, so a scripted endpoint on
/// loopback answers every request, that one refused), and the deletion
/// counts as nothing taken, so the group is not passed over again at once.
#[test]
fn a_network_still_in_use_is_not_taken_as_deleted() {
    use crate::cloud::control::reconcile::Op;
    use crate::cloud::world::{Network, World};
    use std::io::{BufRead, BufReader, Read, Write};

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut stream = stream;
            // Requests on one connection, one after another.
            'requests: loop {
                let mut length = 0;
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break 'requests;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let body = String::from_utf8_lossy(&body).into_owned();
                let action = body
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("Action="))
                    .unwrap_or_default()
                    .to_owned();
                let (status, answer) = if action == "DeleteSecurityGroup" {
                    (
                        "400 Bad Request",
                        "<Response><Errors><Error><Code>DependencyViolation</Code>\
                         <Message>resource sg-1 has a dependent object</Message>\
                         </Error></Errors><RequestID>r</RequestID></Response>",
                    )
                } else {
                    (
                        "200 OK",
                        "<Response><requestId>r</requestId><return>true</return></Response>",
                    )
                };
                log.lock().unwrap().push(action);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                );
            }
        }
    });
    let p = super::plan(GROUP, "in-use");
    let ec2 = Ec2::new(
        &settings(&format!("http://127.0.0.1:{port}")),
        Some(&p.region),
        Tuning::default(),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let world = World {
        instances: Vec::new(),
        network: Some(Network {
            id: "sg-1".into(),
            ready: true,
        }),
        bucket: None,
        bucket_unread: None,
    };
    let took = rt
        .block_on(ops::apply(&ec2, None, &p, &world, &Op::DeleteNetwork))
        .expect("a refusal the reconciler waits out");
    assert!(!took, "a security group in use counted as deleted");
    assert_eq!(
        asked.lock().unwrap().last().map(String::as_str),
        Some("DeleteSecurityGroup")
    );
}

/// S3 on moto: a bucket made, a streamed object uploaded, listed, fetched
/// whole through a presigned URL with no credentials (by curl, as a node
/// fetches it), then everything gone. moto neither checks signatures nor
/// the signed `x-amz-content-sha256` (S3 refuses other bytes with
/// `XAmzContentSHA256Mismatch`): `sigv4`'s tests hold the signatures to
/// S3's documented ones, and every node checks the SHA-256 it fetched.
#[test]
fn s3_keeps_objects_and_serves_them_presigned() {
    use crate::aws::s3::S3;
    let Some(t) = moto() else { return };
    let endpoint = t.settings.endpoint.clone().unwrap();
    let s3 = S3::new(
        Some(&endpoint),
        "eu-west-1",
        t.settings.credentials.clone(),
        Tuning::default(),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bucket = format!("skyc-test-{}", std::process::id());
    // 3 MiB and a bit: several chunks of the streamed body.
    let data: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i * 7 % 251) as u8).collect();
    let sha = crate::files::tar::sha256(&data);
    let source = |bytes: Vec<u8>| -> crate::aws::s3::Source {
        std::sync::Arc::new(move |w: &mut dyn std::io::Write| w.write_all(&bytes))
    };
    rt.block_on(async {
        assert_eq!(s3.list(&bucket).await.unwrap(), None);
        s3.create_bucket(&bucket).await.unwrap();
        // Made again: the same bucket.
        s3.create_bucket(&bucket).await.unwrap();
        s3.put_object(
            &bucket,
            "a.tar",
            data.len() as u64,
            &sha,
            source(data.clone()),
        )
        .await
        .unwrap();
        let listed = s3.list(&bucket).await.unwrap().unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|o| (o.key.as_str(), o.size))
                .collect::<Vec<_>>(),
            [("a.tar", data.len() as u64)]
        );
        // An object replaced since its listing, by one of the same size:
        // the listed version is refused, not downloaded.
        let to = std::env::temp_dir().join(format!("skyc-s3-version-{}", std::process::id()));
        std::fs::write(&to, b"").unwrap();
        s3.get_object(&bucket, &listed[0], &to).await.unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), data);
        let other: Vec<u8> = data.iter().map(|b| b.wrapping_add(1)).collect();
        let other_sha = crate::files::tar::sha256(&other);
        s3.put_object(
            &bucket,
            "a.tar",
            other.len() as u64,
            &other_sha,
            source(other.clone()),
        )
        .await
        .unwrap();
        let e = s3.get_object(&bucket, &listed[0], &to).await.unwrap_err();
        assert_eq!(e.code(), Some("PreconditionFailed"), "{e}");
        assert!(matches!(
            crate::storage::client::why(e),
            crate::storage::CopyError::Changed(_)
        ));
        let relisted = s3.list(&bucket).await.unwrap().unwrap();
        assert_ne!(relisted[0].version, listed[0].version);
        s3.get_object(&bucket, &relisted[0], &to).await.unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), other);
        let _ = std::fs::remove_file(&to);
        s3.put_object(
            &bucket,
            "a.tar",
            data.len() as u64,
            &sha,
            source(data.clone()),
        )
        .await
        .unwrap();
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let url = s3.presign_get(&bucket, "a.tar", now, Duration::from_secs(600));
    let fetched = std::process::Command::new("curl")
        .args(["-fsS", "--max-time", "20", &url])
        .output()
        .unwrap();
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert!(fetched.stdout == data, "the fetched bytes differ");
    rt.block_on(async {
        // A bucket with objects is not deleted; emptied, it is.
        assert!(s3.delete_bucket(&bucket).await.is_err());
        s3.delete_object(&bucket, "a.tar").await.unwrap();
        s3.delete_bucket(&bucket).await.unwrap();
        s3.delete_bucket(&bucket).await.unwrap();
        assert_eq!(s3.list(&bucket).await.unwrap(), None);
    });
}
