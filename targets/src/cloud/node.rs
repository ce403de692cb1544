//! What the request writers of both clouds need to know about one node.

use super::select::Offer;

/// The boot disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Disk {
    pub size_gb: u64,
    /// `low`, `medium`, `high`, `ultra`, `best`; `None` is SkyPilot's
    /// default, medium.
    pub tier: Option<String>,
}

/// SkyPilot's default `disk_size`.
pub(super) const DEFAULT_DISK_GB: u64 = 256;

/// One node, ready to be written as a cloud request.
pub(super) struct NodeSpec<'a> {
    pub group: &'a str,
    pub task: &'a str,
    pub rank: u32,
    /// `{group}-{task}-{rank}`: the GCP instance name, the EC2 `Name` tag.
    pub name: String,
    pub offer: &'a Offer,
    /// The task's own image, when it gave one this cloud can use.
    pub image: Option<&'a str>,
    pub disk: Disk,
    /// The task's `labels`, checked for this cloud.
    pub labels: &'a [(String, String)],
    /// The placement group or resource policy the node joins.
    pub placement: Option<String>,
    pub boot: &'a str,
}

/// The name of a node's instance.
pub(super) fn instance_name(group: &str, task: &str, rank: u32) -> String {
    format!("{group}-{task}-{rank}")
}
