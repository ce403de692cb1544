//! A run's files on AWS: uploaded once per submission to a bucket made
//! for the run ([`Bucket`]), fetched by every node through presigned
//! URLs, gone with the group. Each operation is safe to repeat, as the
//! EC2 ones ([`super::ops`]):
//!
//! - the bucket is made (one this account already owns is made), and
//!   each stream it lacks uploaded, made from its snapshot as it is sent
//!   (one chunk in memory), its SHA-256 signed; a stream listed is not
//!   sent again, so a supervisor that died mid-upload sends the rest;
//! - the nodes get a URL per stream, presigned when the data plane
//!   delivers it, valid for [`URL_LIFETIME`]: no credentials reach a
//!   node;
//! - once the group has ended (or is cancelled), every object and the
//!   bucket are deleted, also by a supervisor that takes the group over
//!   after a crash.

use crate::aws::ec2::client::Error;
use crate::aws::plan::Plan;
use crate::aws::s3::{S3, Source};
use crate::cloud::run::Bucket;
pub use crate::cloud::run::key;
use crate::files::Snapshots;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How long a node's URL may be used: it fetches at once.
pub const URL_LIFETIME: Duration = Duration::from_secs(3600);

/// The run's S3 client and where its snapshots are.
#[derive(Clone, Debug)]
pub struct RunFiles {
    pub s3: S3,
    pub snapshots: Snapshots,
}

/// A bucket name for a run of `group`: `skyc-{group}-{16 random hex}`,
/// within S3's rules (3 to 63 lower-case letters, digits and `-`,
/// starting and ending with a letter or digit), with room left for a
/// pool worker's `-w{group id}` ([`worker_bucket`]).
pub fn bucket_name(group: &str) -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 8];
    // getrandom(2), which does not fail on Linux once booted.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    let random: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut g: String = group
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(30)
        .collect();
    g = g.trim_matches('-').to_owned();
    if g.is_empty() {
        format!("skyc-{random}")
    } else {
        format!("skyc-{g}-{random}")
    }
}

/// The bucket of the pool worker that is group `gid`: each worker
/// uploads its own copy and deletes it when it is retired, so no worker
/// takes another's files away.
pub fn worker_bucket(pool_bucket: &str, gid: i64) -> String {
    format!("{pool_bucket}-w{}", gid.unsigned_abs())
}

/// The keys of the run's bucket, or `None` when it has none (or the run
/// has no files).
pub async fn observe(files: Option<&RunFiles>, plan: &Plan) -> Result<Option<Vec<String>>, Error> {
    let (Some(files), Some(bucket)) = (files, &plan.bucket) else {
        return Ok(None);
    };
    Ok(files
        .s3
        .list(&bucket.name)
        .await?
        .map(|objects| objects.into_iter().map(|o| o.key).collect()))
}

/// Makes the bucket and uploads each stream it lacks.
pub async fn upload(
    files: &RunFiles,
    bucket: &Bucket,
    keys: Option<&[String]>,
) -> Result<(), Error> {
    if keys.is_none() {
        files.s3.create_bucket(&bucket.name).await?;
    }
    let have: BTreeSet<&str> = keys.into_iter().flatten().map(String::as_str).collect();
    for p in &bucket.files {
        let k = key(&p.digest);
        if have.contains(k.as_str()) {
            continue;
        }
        let path = files.snapshots.path(&p.digest);
        if !path.exists() {
            return Err(Error::Request(format!(
                "the snapshot {} the run was submitted with is gone from {}",
                p.digest,
                files.snapshots.dir().display()
            )));
        }
        let source: Source =
            Arc::new(move |w: &mut dyn std::io::Write| crate::files::tar::write(&path, w));
        files
            .s3
            .put_object(&bucket.name, &k, p.bytes, &p.sha256, source)
            .await?;
    }
    Ok(())
}

/// Deletes every object of the bucket, then the bucket.
pub async fn delete(files: &RunFiles, bucket: &Bucket, keys: &[String]) -> Result<(), Error> {
    for k in keys {
        files.s3.delete_object(&bucket.name, k).await?;
    }
    files.s3.delete_bucket(&bucket.name).await
}

/// Task `task`'s streams, each with a URL a node fetches it from for
/// [`URL_LIFETIME`] from `now_secs`.
pub fn urls(files: &RunFiles, plan: &Plan, task: usize, now_secs: i64) -> Vec<(String, String)> {
    let Some(bucket) = &plan.bucket else {
        return Vec::new();
    };
    bucket
        .tasks
        .get(task)
        .into_iter()
        .flatten()
        .map(|d| {
            let url = files
                .s3
                .presign_get(&bucket.name, &key(d), now_secs, URL_LIFETIME);
            (d.clone(), url)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_keep_s3s_rules() {
        for group in ["rlhf", "Train_Eval.v2", "--", &"x".repeat(200), "ü"] {
            let name = bucket_name(group);
            assert!((3..=63).contains(&name.len()), "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{name}"
            );
            assert!(!name.ends_with('-') && name.starts_with("skyc-"), "{name}");
        }
        assert!(bucket_name("Train_Eval").starts_with("skyc-train-eval-"));
        let worker = worker_bucket(&bucket_name(&"x".repeat(200)), 999_999_999);
        assert!(worker.len() <= 63, "{worker}");
        assert_ne!(bucket_name("g"), bucket_name("g"));
    }
}
