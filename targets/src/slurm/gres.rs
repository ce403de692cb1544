//! A task's GPUs as Slurm GRES: `--gres=gpu:<type>:<count>`, with the
//! type as the cluster names it (gres.conf `Type=`), by SkyPilot's rule
//! (`sky/provision/slurm/utils.py`, `resolve_gres_gpu_type`).
//!
//! - Without a cluster (`skyc build`), the type is written as the task
//!   names it.
//! - With the cluster's GPU nodes ([`ClusterGpus`], from sinfo), the
//!   requested name is matched against each node's type: equal ignoring
//!   case; equal once a vendor prefix (`nvidia_`, ...) is dropped and `_`
//!   read as `-`; or one name's `-` segments a subsequence of the
//!   other's (`H100` ~ `nvidia_h100_80gb_hbm3`, `A100-80GB` ~
//!   `a100-sxm4-80gb`, never `L4` ~ `L40`). Only nodes with at least the
//!   count per node take part. Among matches: the exact one, then the type
//!   on most nodes, then the first by name.
//! - No match is an error naming the types the cluster offers.

/// The GPUs of one kind of node in one partition, as sinfo reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuNodes {
    pub partition: String,
    /// The partition a job without `--partition` goes to (sinfo's `*`, or
    /// the client's `SBATCH_PARTITION`).
    pub default: bool,
    /// `None`: untyped (`gpu:8`).
    pub gpu_type: Option<String>,
    /// GPUs per node.
    pub per_node: u32,
    /// How many nodes have them.
    pub nodes: u32,
}

/// The GPU nodes of a cluster, by partition.
pub type ClusterGpus = Vec<GpuNodes>;

/// The GPU nodes a job of `partition` (sbatch's `--partition`: one, or a
/// comma list) can get; without one, the default partition's.
pub fn in_partition(cluster: &[GpuNodes], partition: Option<&str>) -> ClusterGpus {
    cluster
        .iter()
        .filter(|g| match partition {
            Some(list) => list.split(',').any(|p| p == g.partition),
            None => g.default,
        })
        .cloned()
        .collect()
}

/// Parses one node's GRES as sinfo's `%G` prints it: comma-separated
/// `name[:type]:count[(extra)]` entries, `(null)` for none. The `gpu`
/// entry, if any: its type and count.
pub fn parse_node_gres(gres: &str) -> Option<(Option<String>, u32)> {
    for entry in gres.split(',') {
        let entry = entry.trim();
        let entry = entry.split_once('(').map_or(entry, |(e, _)| e);
        let mut parts = entry.split(':');
        if !parts.next()?.eq_ignore_ascii_case("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        return match rest.as_slice() {
            [count] => Some((None, count.parse().ok()?)),
            [ty, count] => Some((Some((*ty).to_owned()), count.parse().ok()?)),
            _ => None,
        };
    }
    None
}

/// The types (in order) a cluster's GPU nodes name.
pub fn types(cluster: &[GpuNodes]) -> Vec<String> {
    let mut out: Vec<String> = cluster.iter().filter_map(|g| g.gpu_type.clone()).collect();
    out.sort();
    out.dedup();
    out
}

/// Why no type of the cluster will do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// Every type the cluster names.
    pub offered: Vec<String>,
    /// A type of that name whose nodes have too few: the most per node.
    pub too_few: Option<(String, u32)>,
}

/// The cluster's type for `requested` with at least `count` per node.
pub fn resolve(requested: &str, count: u32, cluster: &[GpuNodes]) -> Result<String, Missing> {
    let mut candidates: Vec<(&str, u32)> = Vec::new();
    for g in cluster {
        let Some(ty) = g.gpu_type.as_deref() else {
            continue;
        };
        if g.per_node < count || !matches(requested, ty) {
            continue;
        }
        match candidates.iter_mut().find(|(t, _)| *t == ty) {
            Some((_, nodes)) => *nodes += g.nodes,
            None => candidates.push((ty, g.nodes)),
        }
    }
    candidates
        .into_iter()
        .min_by_key(|&(ty, nodes)| {
            (
                !ty.eq_ignore_ascii_case(requested),
                std::cmp::Reverse(nodes),
                ty,
            )
        })
        .map(|(ty, _)| ty.to_owned())
        .ok_or_else(|| Missing {
            offered: types(cluster),
            too_few: cluster
                .iter()
                .filter_map(|g| Some((g.gpu_type.as_deref()?, g.per_node)))
                .filter(|(ty, _)| matches(requested, ty))
                .max_by_key(|&(ty, n)| (n, std::cmp::Reverse(ty)))
                .map(|(ty, n)| (ty.to_owned(), n)),
        })
}

const VENDOR_PREFIXES: [&str; 4] = ["nvidia", "amd", "intel", "tesla"];

/// Lower case, `_` as `-`, without a vendor prefix.
fn normalize(name: &str) -> String {
    let lower = name.to_ascii_lowercase().replace('_', "-");
    for prefix in VENDOR_PREFIXES {
        if let Some(rest) = lower.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) {
            return rest.to_owned();
        }
    }
    lower
}

/// Whether a requested name and a cluster's type name the same GPU.
pub fn matches(requested: &str, raw: &str) -> bool {
    if requested.eq_ignore_ascii_case(raw) {
        return true;
    }
    let (a, b) = (normalize(requested), normalize(raw));
    if a == b {
        return true;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('-').collect(), b.split('-').collect());
    if a.len() < b.len() {
        subsequence(&a, &b)
    } else if b.len() < a.len() {
        subsequence(&b, &a)
    } else {
        false
    }
}

/// Whether `a`'s segments appear in `b` in order, each whole.
fn subsequence(a: &[&str], b: &[&str]) -> bool {
    let mut rest = b.iter();
    a.iter().all(|seg| rest.any(|s| s == seg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ty: Option<&str>, per_node: u32, nodes: u32) -> GpuNodes {
        GpuNodes {
            partition: "main".into(),
            default: true,
            gpu_type: ty.map(str::to_owned),
            per_node,
            nodes,
        }
    }

    #[test]
    fn sinfo_gres_is_read_with_or_without_a_type() {
        assert_eq!(
            parse_node_gres("gpu:h100:8(S:0-1)"),
            Some((Some("h100".into()), 8))
        );
        assert_eq!(parse_node_gres("gpu:4"), Some((None, 4)));
        assert_eq!(
            parse_node_gres("shard:8,gpu:nvidia_a100_80gb:2"),
            Some((Some("nvidia_a100_80gb".into()), 2))
        );
        assert_eq!(parse_node_gres("(null)"), None);
        assert_eq!(parse_node_gres(""), None);
        assert_eq!(parse_node_gres("gpu:a:b:c"), None);
    }

    #[test]
    fn names_match_as_skypilot_matches_them() {
        assert!(matches("H100", "h100"));
        assert!(matches("H100", "nvidia_h100_80gb_hbm3"));
        assert!(matches("A100-80GB", "a100-sxm4-80gb"));
        assert!(matches("A100-80GB", "NVIDIA_A100_SXM4_80GB"));
        assert!(matches("V100-32GB", "v100-pcie-32gb"));
        assert!(!matches("V100-32GB", "v100-pcie-16gb"));
        assert!(!matches("L4", "l40"));
        assert!(!matches("L4", "l40s"));
        assert!(!matches("A100", "H100"));
    }

    #[test]
    fn the_exact_type_then_the_most_nodes_then_the_name_is_chosen() {
        let cluster = vec![
            nodes(Some("nvidia_h100_80gb_hbm3"), 8, 10),
            nodes(Some("H100"), 8, 2),
            nodes(Some("h100-sxm"), 8, 4),
        ];
        assert_eq!(resolve("h100", 8, &cluster).unwrap(), "H100");
        let fuzzy = &cluster[..1];
        assert_eq!(resolve("H100", 4, fuzzy).unwrap(), "nvidia_h100_80gb_hbm3");
        let two = vec![nodes(Some("h100-b"), 8, 3), nodes(Some("h100-a"), 8, 3)];
        assert_eq!(resolve("H100", 1, &two).unwrap(), "h100-a");
    }

    #[test]
    fn too_few_per_node_or_an_unknown_type_names_what_there_is() {
        let cluster = vec![
            nodes(Some("a100"), 2, 4),
            nodes(Some("H100"), 2, 4),
            nodes(None, 4, 1),
        ];
        let offered = vec!["H100".to_owned(), "a100".to_owned()];
        assert_eq!(resolve("A100", 2, &cluster).unwrap(), "a100");
        assert_eq!(
            resolve("A100", 4, &cluster),
            Err(Missing {
                offered: offered.clone(),
                too_few: Some(("a100".into(), 2))
            })
        );
        assert_eq!(
            resolve("V100", 1, &cluster),
            Err(Missing {
                offered,
                too_few: None
            })
        );
        assert_eq!(
            resolve("V100", 1, &[]),
            Err(Missing {
                offered: vec![],
                too_few: None
            })
        );
    }

    #[test]
    fn a_job_sees_the_nodes_of_its_partitions_or_the_default_one() {
        let mut gpu = nodes(Some("a100"), 2, 4);
        gpu.default = false;
        gpu.partition = "gpu".into();
        let cpu = nodes(None, 0, 8);
        let cluster = vec![gpu.clone(), cpu.clone()];
        assert_eq!(in_partition(&cluster, None), vec![cpu.clone()]);
        assert_eq!(in_partition(&cluster, Some("gpu")), vec![gpu.clone()]);
        assert_eq!(in_partition(&cluster, Some("main,gpu")), vec![gpu, cpu]);
        assert_eq!(in_partition(&cluster, Some("other")), []);
    }
}
