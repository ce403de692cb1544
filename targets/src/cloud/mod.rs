//! The cloud targets: one Job Group to a reviewable instance spec for AWS
//! or GCP (`skyc build FILE --target aws|gcp`).
//!
//! The instances are chosen by SkyPilot's rule from SkyPilot's catalog
//! ([`select`] per resource candidate, [`group`] for the Job Group rule:
//! one region for every task, the cheapest in total), and the spec carries
//! both the intent (group, region, per-node hostname, task, rank, role,
//! delays, recovery, hourly price) and the exact requests a runtime sends:
//! per node an EC2 `RunInstances` request or a Compute `instances.insert`
//! body, per group the security group or firewall that lets the nodes
//! reach each other and the placement asked for. Each node boots with a
//! script ([`boot`]) that writes the environment contract, keeps the
//! group's hostnames in `/etc/hosts` and runs setup then run under the
//! node agent. A pipeline (`execution: serial`) is lowered the same way,
//! each step to instances of its own, in one region, and the spec says
//! the steps run one after another (its `execution`): the runtime launches
//! a step's instances when the step starts and terminates them when it
//! ends. docs/targets/cloud.md has the whole design.
//!
//! Pure: [`build`] takes the IR and catalog rows (read by the command
//! line) and returns the spec and diagnostics located in the source.
//!
//! - `csv`, `catalog`: SkyPilot's `vms.csv` as rows, and the snapshot
//!   skyc ships;
//! - `request`, `families`, `select`: SkyPilot's selection rule;
//! - `group`: the Job Group rule;
//! - `boot` (with `agent.sh`): the boot script and node agent;
//! - `node`, `aws`, `gcp`: the native requests;
//! - `scope`: the session policy a node's credentials are narrowed by;
//! - `spec`: the document;
//! - `controller`: skyc's controller on AWS (its instance, role and
//!   policy).

mod aws;
mod boot;
pub mod catalog;
pub mod controller;
mod csv;
mod families;
mod gcp;
pub mod group;
mod node;
pub mod request;
mod scope;
pub mod select;
mod spec;

pub use boot::{LAUNCHER_MARKER, NODE_DIR, agent, files_functions, mounts_functions};
pub use catalog::{Catalog, CatalogError, Origin, SNAPSHOT_DATE};
pub use scope::session_policy;
pub use spec::{API_VERSION, KIND};

use crate::files::Files;
use group::{Choice, TaskOffers};
use node::{DEFAULT_DISK_GB, Disk, NodeSpec};
use request::Request;
use select::{Infeasible, Offer};
use serde_json::Value;
use skyc_compiler::ir::{Candidate, Execution, Group, Image, PortRange, Task, Workdir};
use skyc_compiler::{Diagnostic, Diagnostics, Rule, Severity, Span};

/// A cloud skyc writes instance specs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cloud {
    Aws,
    Gcp,
}

impl Cloud {
    /// `aws`, `gcp`: the name in `infra` and in SkyPilot's catalog layout.
    pub fn name(self) -> &'static str {
        match self {
            Cloud::Aws => "aws",
            Cloud::Gcp => "gcp",
        }
    }

    /// The cloud named `name` (`aws`, `gcp`), as [`Cloud::name`] says it.
    pub(crate) fn named(name: &str) -> Option<Cloud> {
        [Cloud::Aws, Cloud::Gcp]
            .into_iter()
            .find(|c| c.name() == name)
    }

    /// `AWS`, `GCP`.
    pub fn display(self) -> &'static str {
        match self {
            Cloud::Aws => "AWS",
            Cloud::Gcp => "GCP",
        }
    }

    /// The most bytes of boot script a node accepts: EC2 user data is
    /// limited to 16 KB before base64; a GCP metadata value to 256 KB.
    pub fn max_boot_script_bytes(self) -> usize {
        match self {
            Cloud::Aws => 16 * 1024,
            Cloud::Gcp => 256 * 1024,
        }
    }
}

/// The most nodes one spec holds: each carries its own request and boot
/// script (a few KB), so this bounds a spec to tens of MB. Accounts'
/// instance quotas are far lower.
pub const MAX_NODES: u64 = 10_000;

/// The most bytes of boot scripts one spec holds (each node carries its
/// own), so that no group makes the spec unbounded.
pub const MAX_BOOT_SCRIPT_BYTES: usize = 64 << 20;

/// The spec, or why there is none; warnings either way.
#[derive(Debug)]
pub struct Build {
    /// One document for the group; `None` when there is an error.
    pub document: Option<Value>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Build {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Lowers `group` to the instance spec of the catalog's cloud, with no
/// files read: a local `workdir` and `file_mounts` are reported as not
/// delivered.
pub fn build(group: &Group, catalog: &Catalog) -> Build {
    build_with_files(group, catalog, None)
}

/// Lowers `group` with its files as a submission took them: each node's
/// boot script fetches, checks and places its task's snapshots
/// (docs/targets/cloud.md, "Code and data").
pub fn build_with_files(group: &Group, catalog: &Catalog, files: Option<&Files>) -> Build {
    let mut l = Lowerer {
        group,
        catalog,
        files,
        cloud: catalog.cloud,
        diagnostics: Diagnostics::default(),
        boot_budget: MAX_BOOT_SCRIPT_BYTES,
        task_ids: task_ids(group, catalog.cloud),
        memo: std::collections::HashMap::new(),
    };
    let document = l.lower();
    let failed = l.diagnostics.has_errors();
    let diagnostics = l.diagnostics.into_sorted();
    Build {
        document: if failed { None } else { document },
        diagnostics,
    }
}

/// What one resource candidate of a task came to.
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    Offers(Vec<Offer>),
    Infeasible(Infeasible),
    /// Pinned by `infra` to another cloud.
    OtherCloud(String),
    /// `ordered`, and an earlier candidate is feasible.
    NotTried,
}

/// A task's candidates and what each came to.
pub(crate) struct Considered {
    pub requests: Vec<Request>,
    pub outcomes: Vec<Outcome>,
}

struct Lowerer<'a> {
    group: &'a Group,
    catalog: &'a Catalog,
    /// The tasks' files, when a submission (or the build) read them.
    files: Option<&'a Files>,
    cloud: Cloud,
    /// At most `MAX_DIAGNOSTICS`, as the front end's: a group of thousands
    /// of infeasible tasks costs no more to report.
    diagnostics: Diagnostics,
    /// Bytes of boot scripts the spec may still hold.
    boot_budget: usize,
    /// `SKYPILOT_TASK_IDS`, the same on every node.
    task_ids: String,
    /// Offers per distinct request: groups repeat their requests, and a
    /// full catalog has tens of thousands of rows.
    memo: std::collections::HashMap<String, Result<Vec<Offer>, Infeasible>>,
}

impl Lowerer<'_> {
    fn lower(&mut self) -> Option<Value> {
        let nodes: u64 = self
            .group
            .tasks
            .iter()
            .map(|t| u64::from(t.num_nodes))
            .sum();
        if nodes > MAX_NODES {
            let span = self.group_span();
            self.error(
                Rule::CloudTooManyNodes,
                span,
                format!(
                    "`{}` has {nodes} nodes; one instance spec holds at most {MAX_NODES}",
                    self.group.name
                ),
                "too many nodes",
                Some("split the group, or lower `num_nodes`".to_owned()),
            );
            return None;
        }
        // Every boot script carries the agent and the group's task ids:
        // refuse what cannot fit before building any.
        let least = boot::agent().len() + self.task_ids.len();
        let max = self.cloud.max_boot_script_bytes();
        if least > max {
            let span = self.group_span();
            self.error(
                Rule::CloudUserDataTooLarge,
                span,
                format!(
                    "`{}` has {} tasks: their ids (SKYPILOT_TASK_IDS, {} bytes) and skyc's node agent leave no room in a boot script: {} takes at most {max} bytes",
                    self.group.name,
                    self.group.tasks.len(),
                    self.task_ids.len(),
                    self.cloud.display()
                ),
                "too many tasks",
                Some("split the group".to_owned()),
            );
            return None;
        }
        if least.saturating_mul(nodes as usize) > MAX_BOOT_SCRIPT_BYTES {
            self.too_large();
            return None;
        }
        self.check_names();
        let mut considered = Vec::new();
        let mut offers = Vec::new();
        for task in &self.group.tasks {
            let (c, o) = self.task_offers(task);
            considered.push(c);
            offers.push(o);
        }
        if self.failed() {
            return None;
        }
        let placement = match group::place(&offers) {
            Ok(p) => p,
            Err(e) => {
                self.no_common_region(&e.regions);
                return None;
            }
        };
        let mut tasks = Vec::new();
        let mut nodes = Vec::new();
        let mut ports: Vec<(PortRange, String)> = Vec::new();
        let mut placements: Vec<(String, u32)> = Vec::new();
        for (index, task) in self.group.tasks.iter().enumerate() {
            let choice = &placement.choices[index];
            let candidate = &task.resources.candidates[choice.candidate];
            self.not_applied(index, task, candidate);
            let image = self.image(task, candidate);
            let labels = self.labels(task, candidate);
            let placement_name = self.placement(task, candidate);
            if let Some(name) = &placement_name {
                placements.push((name.clone(), task.num_nodes));
            }
            for range in &candidate.ports {
                if !ports.iter().any(|(r, _)| r == range) {
                    ports.push((*range, task.name.clone()));
                }
            }
            let disk = Disk {
                size_gb: candidate.disk_size_gb.unwrap_or(DEFAULT_DISK_GB),
                tier: candidate.disk_tier.clone(),
            };
            let task_nodes = self.nodes(
                task,
                index,
                &placement.region,
                choice,
                image.as_deref(),
                &disk,
                &labels,
                placement_name.as_deref(),
            );
            nodes.extend(task_nodes);
            tasks.push(spec::task(
                task,
                choice,
                &considered[index],
                &placement.region,
                placement_name.as_deref(),
            ));
        }
        if self.failed() {
            return None;
        }
        ports.sort_by_key(|(r, _)| (r.start, r.end));
        let requests = match self.cloud {
            Cloud::Aws => {
                let names: Vec<String> = placements.iter().map(|(n, _)| n.clone()).collect();
                let kind = match self.group.execution {
                    Execution::Parallel => "Job Group",
                    Execution::Serial => "pipeline",
                };
                aws::group_requests(&self.group.name, kind, &ports, &names)
            }
            Cloud::Gcp => {
                let ports: Vec<String> = ports
                    .iter()
                    .map(|(r, _)| {
                        if r.start == r.end {
                            r.start.to_string()
                        } else {
                            format!("{}-{}", r.start, r.end)
                        }
                    })
                    .collect();
                gcp::group_requests(&self.group.name, &placement.region, &ports, &placements)
            }
        };
        Some(spec::document(
            self.group,
            self.catalog,
            &placement,
            tasks,
            requests,
            nodes,
        ))
    }

    fn failed(&self) -> bool {
        self.diagnostics.has_errors()
    }

    /// Where group-wide findings point: the header's name, or the task of
    /// a single-task file.
    fn group_span(&self) -> Span {
        self.group
            .name_span
            .or_else(|| self.group.tasks.first().map(|t| t.name_span))
            .unwrap_or_default()
    }

    fn error(
        &mut self,
        rule: Rule,
        span: Span,
        message: String,
        label: &str,
        help: Option<String>,
    ) {
        let mut d = Diagnostic::new(rule, span, message)
            .label(label.to_owned())
            .severity(Severity::Error);
        if let Some(h) = help {
            d = d.help(h);
        }
        self.diagnostics.push(d);
    }

    /// A task setting that is reported and not applied.
    fn warn(&mut self, task: &Task, message: String, help: &str) {
        self.diagnostics.push(
            Diagnostic::new(
                Rule::CloudIgnored,
                task.name_span,
                format!("task `{}`: {message}", task.name),
            )
            .label("in this task")
            .help(help.to_owned())
            .severity(Severity::Warning),
        );
    }

    /// Names become instance names, tags or labels, and rule names.
    fn check_names(&mut self) {
        let g = self.group.name.clone();
        match self.cloud {
            Cloud::Gcp => {
                for name in [gcp::internal_firewall(&g), gcp::network_tag(&g)] {
                    if !gcp::is_name(&name) {
                        self.error(
                            Rule::CloudInvalidName,
                            self.group_span(),
                            format!("`{name}`, named after the group, is not a GCP resource name"),
                            "not a GCP name",
                            Some(
                                "GCP names take lower-case letters, digits and `-`, start with a letter and have at most 63 characters: rename the group"
                                    .to_owned(),
                            ),
                        );
                        return;
                    }
                }
                for task in &self.group.tasks {
                    let last =
                        node::instance_name(&g, &task.name, task.num_nodes.saturating_sub(1));
                    if !gcp::is_name(&last) {
                        self.error(
                            Rule::CloudInvalidName,
                            task.name_span,
                            format!("`{last}` (`{{group}}-{{task}}-{{rank}}`) is not a GCP instance name"),
                            "not a GCP name",
                            Some(
                                "instance names take lower-case letters, digits and `-`, start with a letter and have at most 63 characters"
                                    .to_owned(),
                            ),
                        );
                    }
                }
            }
            Cloud::Aws => {
                for task in &self.group.tasks {
                    let last =
                        node::instance_name(&g, &task.name, task.num_nodes.saturating_sub(1));
                    if let Some(problem) = aws::name_problem(&last) {
                        self.error(
                            Rule::CloudInvalidName,
                            task.name_span,
                            problem,
                            "name too long",
                            Some("shorten the group or task name".to_owned()),
                        );
                    }
                }
            }
        }
    }

    /// The offers of a task's usable candidates (SkyPilot's `ordered`:
    /// the first feasible one only), or a located error.
    fn task_offers(&mut self, task: &Task) -> (Considered, TaskOffers) {
        let mut requests = Vec::new();
        let mut outcomes = Vec::new();
        let mut usable = Vec::new();
        let mut found = false;
        for c in &task.resources.candidates {
            let req = Request::of(c);
            let pinned = c.infra.as_ref().and_then(|i| i.cloud.clone());
            let outcome = match pinned {
                Some(cloud) if cloud != self.cloud.name() => Outcome::OtherCloud(cloud),
                _ if found && task.resources.ordered => Outcome::NotTried,
                _ => match self.offers(&req) {
                    Ok(o) if !o.is_empty() => {
                        found = true;
                        Outcome::Offers(o)
                    }
                    Ok(_) => Outcome::Infeasible(Infeasible {
                        reason: "no region offers it".to_owned(),
                        did_you_mean: Vec::new(),
                    }),
                    Err(e) => Outcome::Infeasible(e),
                },
            };
            if let Outcome::Offers(o) = &outcome {
                usable.extend(o.iter().cloned().map(|offer| (requests.len(), offer)));
            }
            requests.push(req);
            outcomes.push(outcome);
        }
        let others: Vec<String> = outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::OtherCloud(c) => Some(c.clone()),
                _ => None,
            })
            .collect();
        let cloud = self.cloud.display();
        if others.len() == outcomes.len() {
            let mut others = others;
            others.dedup();
            self.error(
                Rule::CloudNoInstance,
                task.name_span,
                format!(
                    "`{}` may only run on {}, not on {cloud}",
                    task.name,
                    others.join(", ")
                ),
                "pinned to another cloud",
                Some(format!(
                    "allow {cloud} in `resources.infra` (e.g. `infra: {}`), or build this group for its cloud",
                    self.cloud.name()
                )),
            );
        } else if usable.is_empty() {
            let mut reasons: Vec<String> = Vec::new();
            let mut similar: Vec<String> = Vec::new();
            for (req, o) in requests.iter().zip(&outcomes) {
                if let Outcome::Infeasible(e) = o {
                    let line = if requests.len() > 1 {
                        format!("{} ({})", e.reason, req.describe())
                    } else {
                        e.reason.clone()
                    };
                    if !reasons.contains(&line) {
                        reasons.push(line);
                    }
                    similar.extend(e.did_you_mean.iter().cloned());
                }
            }
            similar.sort();
            similar.dedup();
            let help = if similar.is_empty() {
                "relax or change the task's resources, or read the catalog with `--catalog DIR`"
                    .to_owned()
            } else {
                format!("did you mean: {}", similar.join(", "))
            };
            self.error(
                Rule::CloudNoInstance,
                task.name_span,
                format!(
                    "no {cloud} instance satisfies `{}`: {}",
                    task.name,
                    reasons.join("; ")
                ),
                "no instance for this task",
                Some(help),
            );
        } else if !others.is_empty() {
            let mut others = others;
            others.dedup();
            self.warn(
                task,
                format!(
                    "the resource choices pinned to {} are dropped; {cloud} uses the others",
                    others.join(", ")
                ),
                "the spec is for one cloud",
            );
        }
        (
            Considered { requests, outcomes },
            TaskOffers {
                num_nodes: task.num_nodes,
                offers: usable,
            },
        )
    }

    /// The spec would be too large; said once.
    fn too_large(&mut self) {
        if self.boot_budget == 0 {
            return;
        }
        self.boot_budget = 0;
        let span = self.group_span();
        self.error(
            Rule::CloudTooManyNodes,
            span,
            format!(
                "the boot scripts of `{}` would take more than {} MiB in one spec",
                self.group.name,
                MAX_BOOT_SCRIPT_BYTES >> 20
            ),
            "spec too large",
            Some("split the group, or lower `num_nodes`".to_owned()),
        );
    }

    fn offers(&mut self, req: &Request) -> Result<Vec<Offer>, Infeasible> {
        let catalog = self.catalog;
        self.memo
            .entry(format!("{req:?}"))
            .or_insert_with(|| select::offers(catalog, req))
            .clone()
    }

    fn no_common_region(&mut self, regions: &[Vec<String>]) {
        let per_task: Vec<String> = self
            .group
            .tasks
            .iter()
            .zip(regions)
            .map(|(t, r)| format!("`{}` in {}", t.name, r.join(", ")))
            .collect();
        let span = self.group_span();
        self.error(
            Rule::CloudNoCommonRegion,
            span,
            format!(
                "the tasks of `{}` share no {} region: {}",
                self.group.name,
                self.cloud.display(),
                per_task.join("; ")
            ),
            "no region for the whole group",
            Some(if self.group.execution == Execution::Serial {
                "skyc runs every step of a pipeline in one region (one security group, one runtime); pin the steps to one region (`infra: aws/<region>`) or change their resources"
                    .to_owned()
            } else {
                "every task of a group runs in one region, so that the group's hostnames reach each other; pin the tasks to one region (`infra: aws/<region>`) or change their resources"
                    .to_owned()
            }),
        );
    }

    fn not_applied(&mut self, index: usize, task: &Task, c: &Candidate) {
        let delivered = self.files.is_some();
        let taken = self.files.map_or(&[][..], |f| f.of(index));
        // A mounted bucket the instance cannot mount: refused, not a
        // node that starts without it. An AWS instance mounts S3's
        // (`boot::mounts`).
        for m in &task.file_mounts {
            let Some(to) = crate::storage::to_mount(m) else {
                continue;
            };
            if mounts_on_instances(self.cloud, &to) {
                continue;
            }
            let why = match self.cloud {
                Cloud::Aws => "the AWS target mounts only S3 buckets on its instances",
                _ => "the GCP target does not mount buckets on its instances yet",
            };
            self.error(
                Rule::CloudBucketMount,
                crate::storage::mount_span(task, m),
                format!(
                    "task `{}`: bucket `{}` cannot be mounted at `{}`: {why}",
                    task.name, to.bucket, m.destination,
                ),
                "mounted here",
                Some(
                    "copy the bucket instead (`mode: COPY`: read when the group is submitted and \
                     given to every node with its files), or run the group where buckets are \
                     mounted: this machine, Slurm, or Kubernetes with `--bucket-mounts sidecar`"
                        .to_owned(),
                ),
            );
        }
        let buckets = delivered
            && task
                .file_mounts
                .iter()
                .any(|m| !crate::files::carries(taken, m) && crate::storage::to_mount(m).is_none());
        let unmounted = || {
            task.file_mounts
                .iter()
                .any(|m| crate::storage::to_mount(m).is_none())
        };
        if buckets || (!delivered && unmounted()) {
            self.warn(
                task,
                if delivered {
                    "bucket and storage `file_mounts` are not applied".to_owned()
                } else {
                    "`file_mounts` are not applied".to_owned()
                },
                "nothing is uploaded to the instances; fetch data in `setup`",
            );
        }
        for v in &task.volumes {
            let name = v
                .volume
                .as_str()
                .map_or_else(|| v.volume.to_string(), str::to_owned);
            self.error(
                Rule::UnknownVolume,
                v.at.0,
                format!(
                    "task `{}`: the volume `{name}` at `{}` cannot be mounted: the {} target has no volumes",
                    task.name,
                    v.path,
                    self.cloud.display()
                ),
                "no volume on this target",
                Some(
                    "run the group on Kubernetes or Slurm, where volumes are claims or shared directories (`skyc volume apply`), or keep what tasks share in a bucket the tasks read and write themselves"
                        .to_owned(),
                ),
            );
        }
        if let Some(Workdir::Local { path, .. }) = &task.workdir
            && !delivered
        {
            self.warn(
                task,
                format!("the local `workdir` `{path}` is not uploaded"),
                &format!(
                    "setup and run start in {NODE_DIR}/workdir; a git `workdir` is cloned there"
                ),
            );
        }
        if task.config.as_ref().is_some_and(|v| !v.is_null())
            && !only_placement_config(task, self.cloud)
        {
            self.warn(
                task,
                "the per-task `config` overrides are not applied".to_owned(),
                "the spec's requests are all there is; `config.gcp.placement_policy: compact` is the one key read (GCP)",
            );
        }
        if let Some(tier) = &c.network_tier
            && tier == "best"
            && task.num_nodes < 2
        {
            self.warn(
                task,
                "`network_tier: best` places nodes together; a single node needs no placement"
                    .to_owned(),
                "it takes effect with `num_nodes` of 2 or more",
            );
        }
    }

    /// The task's own image, when this cloud can use it.
    fn image(&mut self, task: &Task, c: &Candidate) -> Option<String> {
        match &c.image {
            None => None,
            Some(Image::Docker(image)) => {
                self.warn(
                    task,
                    format!("`image_id: docker:{image}` is not applied"),
                    "tasks run on the instance's own image, not in a container",
                );
                None
            }
            Some(Image::Cloud(id)) if id.starts_with("skypilot:") => {
                self.warn(
                    task,
                    format!("`image_id: {id}` names an image of SkyPilot's image catalog, which skyc does not read; the default image is used"),
                    "give the cloud's own image id",
                );
                None
            }
            Some(Image::Cloud(id)) => {
                let ok = match self.cloud {
                    Cloud::Aws => aws::is_image(id),
                    Cloud::Gcp => gcp::is_image(id),
                };
                if ok {
                    Some(id.clone())
                } else {
                    let form = match self.cloud {
                        Cloud::Aws => "`ami-...` or `resolve:ssm:...`",
                        Cloud::Gcp => "`projects/P/global/images/...`",
                    };
                    self.warn(
                        task,
                        format!(
                            "`image_id: {id}` is not a {} image; the default image is used",
                            self.cloud.display()
                        ),
                        &format!("{} images are written {form}", self.cloud.display()),
                    );
                    None
                }
            }
        }
    }

    /// The candidate's `labels`, checked for this cloud (SkyPilot rejects
    /// labels a cloud cannot carry); `skyc-*` keys are skyc's own.
    fn labels(&mut self, task: &Task, c: &Candidate) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (k, v) in &c.labels {
            let problem = if k.starts_with("skyc-") {
                Some(format!(
                    "the label key `{k}` is reserved: skyc tags every instance with `skyc-group`, `skyc-task` and `skyc-rank`"
                ))
            } else {
                match self.cloud {
                    Cloud::Aws => aws::label_problem(k, v),
                    Cloud::Gcp => gcp::label_problem(k, v),
                }
            };
            match problem {
                Some(p) => self.error(
                    Rule::CloudInvalidName,
                    task.name_span,
                    p,
                    "in this task",
                    None,
                ),
                None => out.push((k.clone(), v.clone())),
            }
        }
        out
    }

    /// The placement group (AWS) or compact placement policy (GCP) of a
    /// task that asks for its nodes to be close: `network_tier: best`, or
    /// `config.gcp.placement_policy: compact` on GCP.
    fn placement(&mut self, task: &Task, c: &Candidate) -> Option<String> {
        let best = c.network_tier.as_deref() == Some("best");
        let asked = best || (self.cloud == Cloud::Gcp && gcp_compact(task));
        if !asked || task.num_nodes < 2 {
            return None;
        }
        let name = match self.cloud {
            Cloud::Aws => aws::placement_group(&self.group.name, &task.name),
            Cloud::Gcp => gcp::placement_policy(&self.group.name, &task.name),
        };
        if self.cloud == Cloud::Gcp && !gcp::is_name(&name) {
            self.error(
                Rule::CloudInvalidName,
                task.name_span,
                format!("`{name}`, the task's placement policy, is not a GCP resource name"),
                "not a GCP name",
                Some("shorten the group or task name".to_owned()),
            );
            return None;
        }
        Some(name)
    }

    /// The node entries of one task.
    #[allow(clippy::too_many_arguments)]
    fn nodes(
        &mut self,
        task: &Task,
        index: usize,
        region: &str,
        choice: &Choice,
        image: Option<&str>,
        disk: &Disk,
        labels: &[(String, String)],
        placement: Option<&str>,
    ) -> Vec<Value> {
        let offer = &choice.offer;
        let gpus = offer
            .accelerator
            .as_ref()
            .map_or(0, |(_, count)| count.max(0.0).ceil() as u64);
        let zone = offer
            .zone
            .clone()
            .or_else(|| placement.and_then(|_| offer.zones.first().cloned()));
        if self.boot_budget == 0 {
            return Vec::new();
        }
        let node = |rank: u32| boot::Node {
            group: self.group,
            task,
            index,
            rank,
            cloud: self.cloud.name(),
            region,
            zone: zone.as_deref(),
            gpus,
            task_ids: &self.task_ids,
            files: self.files,
        };
        let script = |rank: u32| boot::script(&node(rank));
        // What the runtime delivers to each node that mounts buckets (for
        // review beside the boot script), and the first rank's boot
        // script: the ranks' scripts differ only in the rank, so the first
        // tells the size of all.
        let policy = scope::of_node(&node(0));
        let (mounts, first) = match boot::mounts(&node(0)).and_then(|m| Ok((m, script(0)?))) {
            Ok(both) => both,
            Err(boot::Unrepresentable(why)) => {
                self.error(
                    Rule::CloudUnrepresentable,
                    task.name_span,
                    format!("task `{}`: {why}", task.name),
                    "in this task",
                    None,
                );
                return Vec::new();
            }
        };
        let max = self.cloud.max_boot_script_bytes();
        if first.len() > max {
            let what = match self.cloud {
                Cloud::Aws => "EC2 takes at most 16384 bytes of user data",
                Cloud::Gcp => "a GCP metadata value holds at most 262144 bytes",
            };
            self.error(
                Rule::CloudUserDataTooLarge,
                task.name_span,
                format!(
                    "the boot script of `{}` is {} bytes; {what}",
                    task.name,
                    first.len()
                ),
                "boot script too large",
                Some(format!(
                    "it carries the task's setup, run and envs ({} bytes of them) and the group's task ids besides skyc's node agent; keep long scripts in the task's git `workdir` or fetch them in `setup`",
                    task_text_bytes(task)
                )),
            );
            return Vec::new();
        }
        let total = first.len().saturating_mul(task.num_nodes as usize);
        if total > self.boot_budget {
            self.too_large();
            return Vec::new();
        }
        self.boot_budget -= total;
        let mut out = Vec::with_capacity(task.num_nodes as usize);
        for rank in 0..task.num_nodes {
            let boot = if rank == 0 {
                first.clone()
            } else {
                match script(rank) {
                    Ok(s) => s,
                    Err(_) => return Vec::new(),
                }
            };
            let name = node::instance_name(&self.group.name, &task.name, rank);
            let spec = NodeSpec {
                group: &self.group.name,
                task: &task.name,
                rank,
                name,
                offer,
                image,
                disk: disk.clone(),
                labels,
                placement: placement.map(str::to_owned),
                boot: &boot,
            };
            let launch = match self.cloud {
                Cloud::Aws => aws::run_instances(&spec),
                Cloud::Gcp => gcp::insert(&spec, region),
            };
            let mut entry = spec::node(self.group, task, rank, offer, zone.as_deref(), launch);
            if let Some(m) = &mounts {
                entry["mounts"] = serde_json::json!(m);
            }
            if let Some(p) = &policy {
                entry["session_policy"] = p.clone();
            }
            out.push(entry);
        }
        out
    }
}

fn task_text_bytes(task: &Task) -> usize {
    task.setup.as_deref().map_or(0, str::len)
        + task.run.as_deref().map_or(0, str::len)
        + task
            .envs
            .iter()
            .map(|e| e.name.len() + e.value.len())
            .sum::<usize>()
}

/// `SKYPILOT_TASK_IDS`: one id per task, `skyc-<cloud>_<group>_<task>-<i>`.
/// Whether `cloud`'s instances mount bucket `to` themselves (rclone, with
/// the credentials the runtime delivers): S3's, on AWS.
pub(crate) fn mounts_on_instances(cloud: Cloud, to: &crate::storage::ToMount) -> bool {
    cloud == Cloud::Aws && to.store == crate::storage::Store::S3
}

fn task_ids(group: &Group, cloud: Cloud) -> String {
    let ids: Vec<String> = group
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| boot::task_id(cloud.name(), &group.name, &t.name, i))
        .collect();
    ids.join("\n")
}

/// `config.gcp.placement_policy: compact`.
fn gcp_compact(task: &Task) -> bool {
    task.config
        .as_ref()
        .and_then(|c| c.pointer("/gcp/placement_policy"))
        .and_then(Value::as_str)
        .is_some_and(|p| p.eq_ignore_ascii_case("compact"))
}

/// Whether the task's `config` holds nothing but the key skyc reads.
fn only_placement_config(task: &Task, cloud: Cloud) -> bool {
    cloud == Cloud::Gcp
        && gcp_compact(task)
        && task.config.as_ref().is_some_and(|c| {
            c.as_object().is_some_and(|m| m.len() == 1)
                && c.get("gcp")
                    .and_then(Value::as_object)
                    .is_some_and(|m| m.len() == 1)
        })
}
