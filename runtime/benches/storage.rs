//! A bucket copied at submission (`skyc_runtime::storage::copy`) from the
//! S3 stand-in (moto's server, `SKYC_MOTO_ENDPOINT`; `scripts/moto start
//! DIR` starts one): OBJECTS objects of SIZE bytes put once, then copied
//! into a snapshot one object at a time and `PARALLEL` at a time, each
//! from a fresh snapshot directory. Prints both times, the throughput
//! and the speed-up.
//!
//! On loopback moto answers in a few milliseconds of its own CPU, where
//! S3 answers a GET after tens of milliseconds of latency: the copies go
//! through a relay in this process that holds each request LATENCY_MS
//! (default 20) on its way in, as a region's S3 roughly does. With 0 the
//! figures are moto's CPU alone.
//!
//! Then, with rclone and FUSE (as root) and `AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY` set (any values for moto), the same prefix mounted
//! (MOUNT, through the same relay): the time until the mount is there,
//! the first read of one object through it, and a read of every object
//! one after another.
//!
//! `cargo bench -p skyc-runtime --bench storage [-- OBJECTS SIZE LATENCY_MS]`
//! (default 1,000 objects of 1 MiB: 1 GiB, 20 ms).

use skyc_runtime::aws::ec2::client::Tuning;
use skyc_runtime::aws::ec2::sigv4::Credentials;
use skyc_runtime::aws::s3::{S3, Source};
use skyc_runtime::files::Snapshots;
use skyc_runtime::files::source::Budget;
use skyc_runtime::storage::copy::{self, PARALLEL};
use skyc_targets::storage::BucketUrl;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let objects = args.first().copied().unwrap_or(1000);
    let size = args.get(1).copied().unwrap_or(1 << 20);
    let latency = Duration::from_millis(args.get(2).copied().unwrap_or(20));
    let Ok(moto) = std::env::var("SKYC_MOTO_ENDPOINT") else {
        eprintln!("SKYC_MOTO_ENDPOINT is not set: `scripts/moto start DIR` starts the stand-in");
        std::process::exit(2);
    };
    let client = |endpoint: &str| {
        S3::new(
            Some(endpoint),
            "us-east-1",
            Credentials {
                access_key_id: "AKIDSKYCBENCH".into(),
                secret_access_key: "skyc-bench-secret".into(),
                session_token: None,
            },
            Tuning::default(),
        )
        .expect("S3 client")
    };
    let relayed = relay(&moto, latency);
    let far = client(&relayed);
    let s3 = client(&moto);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let bucket = format!("skyc-bench-copy-{objects}-{size}");
    let url = BucketUrl::parse(&format!("s3://{bucket}/data")).expect("url");
    rt.block_on(async {
        s3.create_bucket(&bucket).await.expect("CreateBucket");
        let have = s3.list(&bucket).await.expect("list").unwrap_or_default();
        if have.len() as u64 != objects {
            eprintln!("putting {objects} objects of {size} bytes");
            let data: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
            for i in 0..objects {
                let mut body = data.clone();
                body[..8.min(size as usize)]
                    .copy_from_slice(&i.to_le_bytes()[..8.min(size as usize)]);
                let sha = skyc_runtime::files::tar::sha256(&body);
                let source: Source =
                    std::sync::Arc::new(move |w: &mut dyn std::io::Write| w.write_all(&body));
                s3.put_object(
                    &bucket,
                    &format!("data/{:03}/obj-{i}", i % 100),
                    size,
                    &sha,
                    source,
                )
                .await
                .expect("PutObject");
            }
        }
    });
    let bytes = objects * size;
    let mut times = Vec::new();
    for parallel in [1, PARALLEL] {
        let dir = std::env::temp_dir().join(format!(
            "skyc-bench-storage-{}-{parallel}",
            std::process::id()
        ));
        let snapshots = Snapshots::of(&dir);
        let writing = snapshots.writing().expect("lock");
        let mut quiet = |_, _| {};
        let mut budget = Budget {
            limit: u64::MAX,
            files: 0,
            bytes: 0,
            progress: &mut quiet,
        };
        let start = Instant::now();
        let taken = rt
            .block_on(copy::take(
                skyc_runtime::storage::Reach::S3(&far),
                &url,
                &snapshots,
                &writing,
                &mut budget,
                parallel,
            ))
            .unwrap_or_else(|e| panic!("copy: {e:?}"));
        let took = start.elapsed();
        assert_eq!((taken.files, taken.bytes), (objects, bytes));
        drop(writing);
        skyc_runtime::files::store::remove(&dir);
        println!(
            "copy {objects} objects, {:.1} MiB, {} ms latency, {parallel:>2} at a time: {:>7.2} s, \
             {:>6.1} MiB/s",
            bytes as f64 / (1 << 20) as f64,
            latency.as_millis(),
            took.as_secs_f64(),
            bytes as f64 / (1 << 20) as f64 / took.as_secs_f64()
        );
        times.push(took.as_secs_f64());
    }
    println!("speed-up: {:.1}x", times[0] / times[1]);
    mount(&relayed, &bucket, objects, size);
}

/// The prefix mounted at a directory of this process's own: the mount's
/// start, a first read, and every object read in turn.
fn mount(endpoint: &str, bucket: &str, objects: u64, size: u64) {
    use skyc_runtime::storage::mount;
    if mount::client().is_err() || !rustix::process::geteuid().is_root() {
        println!("mount: skipped (needs rclone, /dev/fuse and root)");
        return;
    }
    // rclone reads its credentials as a node's does, from the environment.
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        println!(
            "mount: skipped (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, any values for moto)"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("skyc-bench-mount-{}", std::process::id()));
    let at = dir.join("data");
    std::fs::create_dir_all(&at).expect("mount point");
    let m = skyc_targets::storage::Mounted {
        destination: at.display().to_string(),
        store: skyc_targets::storage::Store::S3,
        bucket: bucket.to_owned(),
        path: "data".into(),
        cached: false,
        endpoint: Some(endpoint.to_owned()),
        region: "us-east-1".into(),
    };
    let start = Instant::now();
    let running = mount::start(&m, &at, &dir, 0, None).expect("mount");
    let mounted = start.elapsed();
    let first = Instant::now();
    let bytes = std::fs::read(at.join("000").join("obj-0")).expect("first object");
    let first = first.elapsed();
    assert_eq!(bytes.len() as u64, size);
    let all = Instant::now();
    let mut read = 0u64;
    for i in 0..objects {
        read += std::fs::read(at.join(format!("{:03}", i % 100)).join(format!("obj-{i}")))
            .expect("object")
            .len() as u64;
    }
    let all = all.elapsed();
    running.finish();
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "mount: there after {:.2} s; first object ({:.1} MiB) read in {:.3} s; all {objects} \
         ({:.1} MiB) one after another in {:.2} s, {:.1} MiB/s",
        mounted.as_secs_f64(),
        size as f64 / (1 << 20) as f64,
        first.as_secs_f64(),
        read as f64 / (1 << 20) as f64,
        all.as_secs_f64(),
        read as f64 / (1 << 20) as f64 / all.as_secs_f64()
    );
}

/// A relay to `endpoint` (`http://HOST:PORT`) holding what each
/// connection sends `latency` before passing it on: its endpoint.
fn relay(endpoint: &str, latency: Duration) -> String {
    let to = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let at = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(&to) else {
                continue;
            };
            let (c2, s2) = (
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            std::thread::spawn(move || pipe(client, server, latency));
            std::thread::spawn(move || pipe(s2, c2, Duration::ZERO));
        }
    });
    format!("http://{at}")
}

fn pipe(mut from: TcpStream, mut to: TcpStream, hold: Duration) {
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        std::thread::sleep(hold);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
