//! The cluster, as kubectl finds it: the kubeconfig (`KUBECONFIG`, else
//! `~/.kube/config`) and its current context or `--context`, else the
//! in-cluster service account.

use super::retry;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::path::Path;
use std::time::Duration;

/// How long a connection to the API server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the reachability check waits for an answer, connection
/// included: `skyc run` says the cluster is unreachable well within 30 s.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// A client and what it talks to.
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    /// Commands in pods (`pods/exec`): a pool job's start and reads.
    pub exec: std::sync::Arc<dyn super::exec::PodExec>,
    /// The API server's URL, for messages.
    pub server: String,
    /// The context's namespace (`default` when it names none).
    pub namespace: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("server", &self.server)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// Loads the configuration of `context` (the current one when `None`)
/// and builds a client. `kubeconfig` is a `KUBECONFIG` value (files
/// separated by `:`, merged as kubectl merges them), `None` for this
/// process's own lookup. kube's own retry layer is off: the runtime
/// retries itself ([`retry`]), the same way for every request.
pub async fn connect(kubeconfig: Option<&str>, context: Option<&str>) -> Result<Cluster, String> {
    from_config(load(kubeconfig, context).await?)
}

/// The configuration [`connect`] builds its client from.
pub async fn load(kubeconfig: Option<&str>, context: Option<&str>) -> Result<Config, String> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let named = |e: &dyn std::fmt::Display| match context {
        Some(name) => format!("kubeconfig context `{name}`: {e}"),
        None => format!(
            "no Kubernetes cluster is configured (KUBECONFIG, ~/.kube/config or an in-cluster service account): {e}"
        ),
    };
    let config = match kubeconfig.filter(|k| !k.is_empty()) {
        Some(paths) => {
            let mut merged: Option<Kubeconfig> = None;
            for path in paths.split(':').filter(|p| !p.is_empty()) {
                let file =
                    Kubeconfig::read_from(path).map_err(|e| named(&format!("{path}: {e}")))?;
                merged = Some(match merged {
                    Some(m) => m.merge(file).map_err(|e| named(&e))?,
                    None => file,
                });
            }
            let merged = merged.ok_or_else(|| named(&"KUBECONFIG names no file"))?;
            Config::from_custom_kubeconfig(merged, &options)
                .await
                .map_err(|e| named(&e))?
        }
        None if context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| named(&e))?,
        None => Config::infer().await.map_err(|e| named(&e))?,
    };
    Ok(config)
}

/// What `skyc run` records of the cluster it checked, so that the
/// supervisor (started by whichever client came first, from another
/// directory and environment, maybe after `kubectl config use-context`)
/// talks to the same one: the kubeconfig files as absolute paths
/// (`KUBECONFIG`, else `~/.kube/config` when it exists; `None` leaves the
/// in-cluster service account) and the context (`--context`, else the
/// files' current one).
pub fn pin(kubeconfig: Option<&str>, context: Option<&str>) -> (Option<String>, Option<String>) {
    let files: Vec<String> = match kubeconfig.filter(|k| !k.is_empty()) {
        Some(paths) => paths
            .split(':')
            .filter(|p| !p.is_empty())
            .map(|p| {
                std::path::absolute(p).map_or_else(|_| p.to_owned(), |a| a.display().to_string())
            })
            .collect(),
        None => std::env::var_os("HOME")
            .map(|home| std::path::Path::new(&home).join(".kube/config"))
            .filter(|p| p.is_file())
            .map(|p| p.display().to_string())
            .into_iter()
            .collect(),
    };
    let context = context.map(str::to_owned).or_else(|| {
        // The first file that names a current context decides, as kubectl.
        files
            .iter()
            .find_map(|f| Kubeconfig::read_from(f).ok()?.current_context)
    });
    let kubeconfig = (!files.is_empty()).then(|| files.join(":"));
    (kubeconfig, context)
}

/// Where a pod finds its service account: its token, the cluster's CA
/// and its namespace.
pub const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The configuration of a pod's own service account, as client-go reads
/// it: the API server at `KUBERNETES_SERVICE_HOST` and `_PORT` (`env`),
/// the token, CA and namespace files of `dir` ([`SERVICE_ACCOUNT`] in a
/// pod). The token file is read again as the kubelet rotates it.
pub fn in_cluster(env: impl Fn(&str) -> Option<String>, dir: &Path) -> Result<Config, String> {
    let var = |name: &str| {
        env(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("{name} is not set: not a pod's environment"))
    };
    let (host, port) = (
        var("KUBERNETES_SERVICE_HOST")?,
        var("KUBERNETES_SERVICE_PORT")?,
    );
    let port: u16 = port
        .parse()
        .map_err(|_| format!("KUBERNETES_SERVICE_PORT `{port}` is not a port"))?;
    // An IPv6 address is bracketed in a URL.
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let url: http::Uri = format!("https://{host}:{port}")
        .parse()
        .map_err(|e| format!("the API server https://{host}:{port}: {e}"))?;
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .map_err(|e| format!("the service account's {}: {e}", dir.join(file).display()))
    };
    let ca = pem_certificates(&read("ca.crt")?);
    if ca.is_empty() {
        return Err(format!(
            "the service account's {} holds no certificate",
            dir.join("ca.crt").display()
        ));
    }
    let token = dir.join("token");
    read("token")?;
    let mut config = Config::new(url);
    config.default_namespace = read("namespace")?.trim().to_owned();
    config.root_cert = Some(ca);
    config.auth_info.token_file = Some(token.display().to_string());
    Ok(config)
}

/// The DER certificates of a PEM bundle.
fn pem_certificates(pem: &str) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in pem.lines().map(str::trim) {
        match (line, &mut body) {
            ("-----BEGIN CERTIFICATE-----", _) => body = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(b)) => {
                if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b.as_bytes()) {
                    out.push(der);
                }
                body = None;
            }
            (line, Some(b)) => b.push_str(line),
            _ => {}
        }
    }
    out
}

/// The client of a loaded configuration.
pub fn from_config(config: Config) -> Result<Cluster, String> {
    build(config, None)
}

/// The client of a controller's replica: its writes pass `fence`
/// ([`super::lease::Fenced`]).
pub fn fenced(config: Config, fence: super::lease::Fence) -> Result<Cluster, String> {
    build(config, Some(fence))
}

fn build(mut config: Config, fence: Option<super::lease::Fence>) -> Result<Cluster, String> {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.default_retry = false;
    let server = config.cluster_url.to_string();
    let namespace = config.default_namespace.clone();
    let failed = |e: kube::Error| format!("the Kubernetes client for {server}: {e}");
    let client = match fence {
        None => Client::try_from(config).map_err(failed)?,
        Some(fence) => kube::client::ClientBuilder::try_from(config)
            .map_err(failed)?
            .with_layer(&super::lease::FenceLayer(fence))
            .build(),
    };
    Ok(Cluster {
        exec: std::sync::Arc::new(super::exec::Timed(
            super::exec::KubeExec(client.clone()),
            super::exec::EXEC_TIMEOUT,
        )),
        client,
        server,
        namespace,
    })
}

/// Asks the API server its version: it answers, or the error names it.
pub async fn probe(cluster: &Cluster) -> Result<(), String> {
    match tokio::time::timeout(PROBE_TIMEOUT, cluster.client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "the Kubernetes API server {} did not answer: {}",
            cluster.server,
            retry::describe(&e)
        )),
        Err(_) => Err(format!(
            "the Kubernetes API server {} did not answer within {} s",
            cluster.server,
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

/// What the client of `skyc run` learns before it submits: where the
/// cluster is, and that it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reached {
    pub server: String,
    pub namespace: String,
}

/// For a caller outside any async runtime (`skyc run`): checks that the
/// cluster of `context` answers. The error names the API server.
pub fn reach(kubeconfig: Option<&str>, context: Option<&str>) -> Result<Reached, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the Kubernetes client: {e}"))?;
    rt.block_on(async {
        let cluster = connect(kubeconfig, context).await?;
        probe(&cluster).await?;
        Ok(Reached {
            server: cluster.server,
            namespace: cluster.namespace,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_and_the_context_are_pinned_as_the_client_found_them() {
        let dir = std::env::temp_dir().join(format!("skyc-pin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n";
        std::fs::write(dir.join("a"), config).unwrap();
        std::fs::write(dir.join("b"), format!("{config}current-context: prod\n")).unwrap();
        let both = format!("{}:{}", dir.join("a").display(), dir.join("b").display());
        assert_eq!(
            pin(Some(&both), None),
            (Some(both.clone()), Some("prod".to_owned())),
            "the first file naming a current context decides"
        );
        assert_eq!(
            pin(Some(&both), Some("dev")),
            (Some(both.clone()), Some("dev".to_owned()))
        );
        // A relative path is the client's, made absolute.
        let relative = pin(Some("some/kubeconfig"), Some("dev")).0.unwrap();
        assert!(
            std::path::Path::new(&relative).is_absolute() && relative.ends_with("some/kubeconfig"),
            "{relative}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_pods_service_account_is_read_from_its_environment() {
        let dir = std::env::temp_dir().join(format!("skyc-sa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "eyJ.token").unwrap();
        std::fs::write(dir.join("namespace"), "ml\n").unwrap();
        // Two certificates, base64 of "one" and "two", lines folded.
        std::fs::write(
            dir.join("ca.crt"),
            "-----BEGIN CERTIFICATE-----\nb25\nl\n-----END CERTIFICATE-----\n\
             -----BEGIN CERTIFICATE-----\ndHdv\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let env = |host: &'static str| {
            move |name: &str| match name {
                "KUBERNETES_SERVICE_HOST" => Some(host.to_owned()),
                "KUBERNETES_SERVICE_PORT" => Some("443".to_owned()),
                _ => None,
            }
        };
        let config = in_cluster(env("10.96.0.1"), &dir).unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://10.96.0.1:443/");
        assert_eq!(config.default_namespace, "ml");
        assert_eq!(
            config.root_cert,
            Some(vec![b"one".to_vec(), b"two".to_vec()])
        );
        assert_eq!(
            config.auth_info.token_file,
            Some(dir.join("token").display().to_string())
        );
        let v6 = in_cluster(env("fd00::1"), &dir).unwrap();
        assert_eq!(v6.cluster_url.to_string(), "https://[fd00::1]:443/");
        // Not a pod: each missing piece is named.
        let none = in_cluster(|_| None, &dir).unwrap_err();
        assert!(
            none.contains("KUBERNETES_SERVICE_HOST is not set"),
            "{none}"
        );
        std::fs::remove_file(dir.join("token")).unwrap();
        let no_token = in_cluster(env("10.96.0.1"), &dir).unwrap_err();
        assert!(no_token.contains("token"), "{no_token}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
