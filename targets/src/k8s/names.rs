//! Kubernetes name rules, and the names skyc gives its objects.
//!
//! The API server and the JobSet webhook enforce these; skyc checks them at
//! build time so a bad name is reported at the source, not at apply time.

/// An RFC 1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63): pod
/// hostnames, namespaces, label-safe object names. The compiler's check,
/// which warns about the same names at `skyc check`.
pub use skyc_compiler::is_dns_label as is_dns1123_label;

/// An RFC 1035 label: an RFC 1123 label that starts with a letter. Service
/// names, and so the JobSet name (its headless Service and pod subdomain).
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// An RFC 1123 subdomain (at most 253): ConfigMap, Secret and PVC names.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// A label value: empty, or at most 63 of `[-A-Za-z0-9_.]` starting and
/// ending with an alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b.iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric())
}

/// A qualified name (label and annotation keys, resource names): an
/// optional DNS-subdomain prefix and `/`, then a non-empty label value.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns1123_subdomain) && !name.is_empty() && is_label_value(name)
}

/// A C identifier as env var names and Secret keys usually are; the API
/// server accepts more, but SkyPilot's names are these.
pub fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Pod hostname and replicated Job name of node `i` of `task`: the left
/// half of the group hostname `{task}-{i}.{group}`.
pub fn node_name(task: &str, i: u32) -> String {
    format!("{task}-{i}")
}

/// The child Job JobSet creates for a replicated Job (`replicas: 1`, so
/// index 0): `{group}-{task}-{i}-0`. The JobSet webhook requires it to be
/// a DNS-1035 label, so at most 63 characters.
pub fn job_name(group: &str, rjob: &str) -> String {
    format!("{group}-{rjob}-0")
}

/// The pod skyc's runtime creates for `attempt` of node `rank` of
/// `task`: one name per attempt, so a new attempt never waits for the
/// old pod's name to be free. At most 63 + 1 + 63 + 22 characters, well
/// within a pod name's 253.
pub fn pod_name(group: &str, task: &str, rank: u32, attempt: u32) -> String {
    format!("{group}-{task}-{rank}-{attempt}")
}

/// The hostname the Job controller gives pod `i` of an Indexed Job:
/// `{job}-{i}`. A pipeline step is one such Job, `{group}-{step}-0`.
pub fn indexed_pod_hostname(job: &str, i: u32) -> String {
    format!("{job}-{i}")
}

/// An Indexed Job's pod name is its hostname and a 5-character random
/// suffix (`-xxxxx`); the JobSet webhook requires it to fit 63.
pub const POD_NAME_SUFFIX_LEN: usize = 6;

/// The most pods an Indexed Job may run at once (the API server's
/// `maxParallelismForIndexedJob`).
pub const MAX_INDEXED_PARALLELISM: u32 = 100_000;

/// The annotation (and label) the Job controller puts on each pod of an
/// Indexed Job: its completion index, a step node's rank.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The native sidecar that mounts a task's `n`-th mounted bucket.
pub fn bucket_sidecar(n: usize) -> String {
    format!("skyc-bucket-{n}")
}

/// The ConfigMap holding the entrypoint and every task's scripts.
pub fn config_map(group: &str) -> String {
    format!("{group}-skyc")
}

/// The Secret the pods read `secrets` from; skyc never writes its values.
pub fn secret(group: &str) -> String {
    format!("{group}-secrets")
}

/// The pod that serves a run's files to its nodes (`skyc run`), and the
/// Secret holding the key its files are served under; in the manifests
/// for kubectl (`skyc build`), the ConfigMap holding them.
pub fn files(group: &str) -> String {
    format!("{group}-skyc-files")
}

/// The replicated Job that completes the JobSet once the runtime has
/// applied the termination delays. Task rjobs always end in `-{digit}`,
/// so no task can collide with it.
pub const GATE: &str = "skyc-gate";

/// The one container of every pod; podFailurePolicy rules name it.
pub const CONTAINER: &str = "main";

/// Where the ConfigMap is mounted.
pub const SCRIPTS_DIR: &str = "/skyc";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert!(is_dns1123_label("trainer-0"));
        assert!(is_dns1123_label("0trainer"));
        assert!(!is_dns1035_label("0trainer"));
        assert!(!is_dns1123_label("my_task"));
        assert!(!is_dns1123_label("Trainer"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_label(&"a".repeat(63)));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(""));
    }

    #[test]
    fn subdomains_values_and_keys() {
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_label_value(""));
        assert!(is_label_value("nvidia-tesla-t4"));
        assert!(is_label_value("A_b.c"));
        assert!(!is_label_value("a+"));
        assert!(is_qualified_name("cloud.google.com/gke-accelerator"));
        assert!(is_qualified_name("team"));
        assert!(!is_qualified_name("/x"));
        assert!(!is_qualified_name("Bad_Prefix/x"));
        assert!(!is_qualified_name("a/"));
    }
}
