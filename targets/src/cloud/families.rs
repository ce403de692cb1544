//! SkyPilot's fixed tables, as its catalog modules write them
//! (`sky/catalog/aws_catalog.py`, `gcp_catalog.py`): the CPU families
//! chosen when no accelerator is asked for, the defaults, and GCP's rules
//! for which host VM carries which GPU.

/// Instance families of the default CPU instance on AWS (`{family}.`).
pub(super) const AWS_DEFAULT_FAMILIES: &[&str] = &[
    "m6i", "m6id", "m7i", "r6i", "r6id", "r7i", "c6i", "c6id", "c7i",
];

/// Instance families of the default CPU instance on GCP (`{family}-`).
pub(super) const GCP_DEFAULT_FAMILIES: &[&str] = &[
    "n2-standard",
    "n2-highmem",
    "n2-highcpu",
    "n4-standard",
    "n4-highcpu",
    "n4-highmem",
];

/// vCPUs asked for when a task asks for neither `cpus` nor `memory`.
pub(super) const DEFAULT_VCPUS: f64 = 8.0;
/// GiB per vCPU asked for when a task does not ask for `memory`.
pub(super) const DEFAULT_MEMORY_PER_CPU: f64 = 4.0;

/// GCP: hosts of GPUs that attach to any N1 VM (prefixes, no dash, as
/// SkyPilot writes them).
pub(super) const GCP_N1_HOSTS: &[&str] = &["n1-standard", "n1-highmem", "n1-highcpu"];

/// GCP: GPUs whose host VM type is fixed by the count: `(name, count,
/// types)`. The GPUs come with the machine type.
pub(super) const GCP_FIXED_HOSTS: &[(&str, u32, &[&str])] = &[
    ("A100", 1, &["a2-highgpu-1g"]),
    ("A100", 2, &["a2-highgpu-2g"]),
    ("A100", 4, &["a2-highgpu-4g"]),
    ("A100", 8, &["a2-highgpu-8g"]),
    ("A100", 16, &["a2-megagpu-16g"]),
    ("A100-80GB", 1, &["a2-ultragpu-1g"]),
    ("A100-80GB", 2, &["a2-ultragpu-2g"]),
    ("A100-80GB", 4, &["a2-ultragpu-4g"]),
    ("A100-80GB", 8, &["a2-ultragpu-8g"]),
    (
        "L4",
        1,
        &[
            "g2-standard-4",
            "g2-standard-8",
            "g2-standard-12",
            "g2-standard-16",
            "g2-standard-32",
        ],
    ),
    ("L4", 2, &["g2-standard-24"]),
    ("L4", 4, &["g2-standard-48"]),
    ("L4", 8, &["g2-standard-96"]),
    ("H100", 1, &["a3-highgpu-1g"]),
    ("H100", 2, &["a3-highgpu-2g"]),
    ("H100", 4, &["a3-highgpu-4g"]),
    ("H100", 8, &["a3-highgpu-8g"]),
    ("H100-MEGA", 8, &["a3-megagpu-8g"]),
    ("H200", 8, &["a3-ultragpu-8g"]),
    ("B200", 8, &["a4-highgpu-8g"]),
];

/// GCP: whether `name` is a GPU with fixed hosts (exact spelling, as
/// SkyPilot's dictionary lookup is).
pub(super) fn gcp_has_fixed_hosts(name: &str) -> bool {
    GCP_FIXED_HOSTS.iter().any(|(n, _, _)| *n == name)
}

/// GCP: the host types of `count` GPUs `name`, when fixed.
pub(super) fn gcp_fixed_hosts(name: &str, count: f64) -> Option<&'static [&'static str]> {
    GCP_FIXED_HOSTS
        .iter()
        .find(|(n, c, _)| *n == name && f64::from(*c) == count)
        .map(|(_, _, types)| *types)
}

/// GCP: the GPUs a fixed host type carries, inferred from the type.
pub(super) fn gcp_gpus_of_host(instance_type: &str) -> Option<(&'static str, u32)> {
    GCP_FIXED_HOSTS
        .iter()
        .find(|(_, _, types)| types.contains(&instance_type))
        .map(|(n, c, _)| (*n, *c))
}

/// GCP: vCPUs of the default N1 host per GPU count (`_NUM_ACC_TO_NUM_CPU`;
/// `DEFAULT` for GPUs not listed).
pub(super) fn gcp_default_host_cpus(name: &str, count: f64) -> Option<f64> {
    let table: &[(u32, f64)] = match name {
        "K80" => &[(1, 4.0), (2, 8.0), (4, 16.0), (8, 32.0), (16, 64.0)],
        "V100" | "P100" => &[(1, 8.0), (2, 16.0), (4, 32.0), (8, 64.0)],
        "T4" => &[(1, 4.0), (2, 8.0), (4, 48.0)],
        _ => &[(1, 8.0), (2, 16.0), (4, 32.0), (8, 64.0), (16, 128.0)],
    };
    table
        .iter()
        .find(|(c, _)| f64::from(*c) == count)
        .map(|(_, cpus)| *cpus)
}

/// GiB per vCPU of the default N1 host of a GPU.
pub(super) const GCP_GPU_HOST_MEMORY_PER_CPU: f64 = 4.0;

/// GCP: the most vCPUs and GiB an N1 host of `count` attachable GPUs may
/// have (`_NUM_ACC_TO_MAX_CPU_AND_MEMORY`), and the counts allowed.
pub(super) fn gcp_attachable_limits(name: &str) -> Option<&'static [(u32, f64, f64)]> {
    Some(match name {
        "K80" => &[
            (1, 8.0, 52.0),
            (2, 16.0, 104.0),
            (4, 32.0, 208.0),
            (8, 64.0, 208.0),
        ],
        "V100" => &[
            (1, 12.0, 78.0),
            (2, 24.0, 156.0),
            (4, 48.0, 312.0),
            (8, 96.0, 624.0),
        ],
        "T4" => &[(1, 48.0, 312.0), (2, 48.0, 312.0), (4, 96.0, 624.0)],
        "P4" => &[(1, 24.0, 156.0), (2, 48.0, 312.0), (4, 96.0, 624.0)],
        "P100" => &[(1, 16.0, 104.0), (2, 32.0, 208.0), (4, 96.0, 624.0)],
        _ => return None,
    })
}

/// GCP's accelerator type name of a GPU (`acceleratorTypes/<name>`), as
/// SkyPilot's GCP template converts it.
pub(super) fn gcp_accelerator_type(name: &str) -> String {
    match name {
        "A100-80GB" | "L4" | "B200" => format!("nvidia-{}", name.to_ascii_lowercase()),
        "H100" | "H100-MEGA" => format!("nvidia-{}-80gb", name.to_ascii_lowercase()),
        "H200" => format!("nvidia-{}-141gb", name.to_ascii_lowercase()),
        _ => format!("nvidia-tesla-{}", name.to_ascii_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables() {
        assert_eq!(gcp_fixed_hosts("L4", 2.0), Some(&["g2-standard-24"][..]));
        assert_eq!(gcp_fixed_hosts("L4", 3.0), None);
        assert_eq!(gcp_gpus_of_host("a3-megagpu-8g"), Some(("H100-MEGA", 8)));
        assert_eq!(gcp_default_host_cpus("T4", 4.0), Some(48.0));
        assert_eq!(gcp_default_host_cpus("P4", 16.0), Some(128.0));
        assert_eq!(gcp_default_host_cpus("T4", 8.0), None);
        assert_eq!(gcp_accelerator_type("T4"), "nvidia-tesla-t4");
        assert_eq!(gcp_accelerator_type("H100"), "nvidia-h100-80gb");
        assert_eq!(gcp_accelerator_type("L4"), "nvidia-l4");
    }
}
