//! The session policy a node's AWS credentials are narrowed by: the
//! buckets its task mounts, and only what rclone does with them.
//!
//! The runtime hands it to STS with the run's credentials
//! (`GetFederationToken`, or the run's own `AssumeRole`), so what the
//! node holds can reach no other bucket and no other service, whatever
//! the run's own credentials may do (IAM takes the intersection). Where
//! STS cannot narrow the run's (temporary credentials with no role), the
//! nodes get the run's own and `skyc status` says so. It is
//! in the spec, on each node's entry (`session_policy`), so a reviewer
//! sees exactly what the instances will be allowed.

use super::boot::{self, Node};
use serde_json::{Value, json};

/// What rclone asks of a mounted bucket: listing it (and its
/// unfinished uploads), where it is.
const BUCKET_ACTIONS: &[&str] = &[
    "s3:GetBucketLocation",
    "s3:ListBucket",
    "s3:ListBucketMultipartUploads",
];

/// What rclone asks of the objects in it: reading, writing (rclone sends
/// a canned `private` ACL with each write, and a rename is a copy then a
/// delete), deleting, and multipart uploads.
const OBJECT_ACTIONS: &[&str] = &[
    "s3:AbortMultipartUpload",
    "s3:DeleteObject",
    "s3:GetObject",
    "s3:ListMultipartUploadParts",
    "s3:PutObject",
    "s3:PutObjectAcl",
];

/// The session policy of `node`'s credentials: `None` when it mounts no
/// bucket (it is then given none).
pub(super) fn of_node(node: &Node) -> Option<Value> {
    let buckets: Vec<String> = boot::mounted(node)
        .into_iter()
        .map(|(_, to)| to.bucket)
        .collect();
    (!buckets.is_empty()).then(|| session_policy(&buckets, node.region))
}

/// The session policy that allows what rclone does with `buckets` in
/// `region`'s partition, and nothing else. Whole buckets, not the
/// mounted paths: rclone looks at a path's parent and at the path as an
/// object too, which a prefix condition would refuse.
pub fn session_policy(buckets: &[String], region: &str) -> Value {
    let mut buckets: Vec<&str> = buckets.iter().map(String::as_str).collect();
    buckets.sort_unstable();
    buckets.dedup();
    let arn = |b: &str| format!("arn:{}:s3:::{b}", partition(region));
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "SkycMountedBuckets",
                "Effect": "Allow",
                "Action": BUCKET_ACTIONS,
                "Resource": buckets.iter().map(|b| arn(b)).collect::<Vec<_>>(),
            },
            {
                "Sid": "SkycMountedObjects",
                "Effect": "Allow",
                "Action": OBJECT_ACTIONS,
                "Resource": buckets.iter().map(|b| format!("{}/*", arn(b))).collect::<Vec<_>>(),
            },
            {
                // A bucket encrypted with a customer-managed KMS key:
                // S3 decrypts and encrypts its objects with the caller's
                // rights, which the session policy bounds too.
                "Sid": "SkycBucketKeys",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": "*",
                "Condition": {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}},
            },
        ],
    })
}

/// The AWS partition of `region`: its ARNs name it.
fn partition(region: &str) -> &'static str {
    const PARTITIONS: &[(&str, &str)] = &[
        ("cn-", "aws-cn"),
        ("us-gov-", "aws-us-gov"),
        ("us-iso-", "aws-iso"),
        ("us-isob-", "aws-iso-b"),
        ("eu-isoe-", "aws-iso-e"),
        ("us-isof-", "aws-iso-f"),
    ];
    PARTITIONS
        .iter()
        .find(|(prefix, _)| region.starts_with(prefix))
        .map_or("aws", |(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::partition;

    #[test]
    fn an_arn_names_the_regions_partition() {
        assert_eq!(partition("us-east-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
        assert_eq!(partition("us-isob-east-1"), "aws-iso-b");
    }
}
