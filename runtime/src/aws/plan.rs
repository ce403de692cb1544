//! The plan of a group run on AWS: the instance spec `skyc build --target
//! aws` emits, cut to what the runtime sends, with the run's identity.
//!
//! The build names things after the group (`skyc-{group}`), so two runs of
//! one group would share them; the runtime makes every name and tag its
//! run's ([`Plan::run`]):
//!
//! | what | the build | the runtime |
//! |---|---|---|
//! | security group | `skyc-{group}` by name | `skyc-{group}-{run}`, tagged `skyc-run`, referred to by id |
//! | placement group | `skyc-{group}-{task}` | `skyc-{group}-{task}-{run}` |
//! | instance tags | `Name`, `skyc-group`, `skyc-task`, `skyc-rank` | plus `skyc-run`, `skyc-attempt` |
//! | `ClientToken` | none | [`client_token`] of run, task, rank and attempt |
//! | key pair (with [`Plan::ssh`]) | none | `skyc-{group}-{run}`, named by every launch, and a `tcp/22` rule from the runtime |
//!
//! So a restarted supervisor finds its run's instances by the `skyc-run`
//! tag, and a `RunInstances` sent again for the same node and attempt
//! (a retry, or a supervisor that died before it saw the answer) is the
//! same request to EC2, which launches nothing twice.

use crate::aws::control::ops;
use crate::aws::credentials::{Access, ConfigError, Source};
use crate::aws::ec2::client::{Ec2, Tuning};
use crate::cloud::run::Run;
use crate::policy::{Execution, GroupSpec};
use ring::digest;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::Group;
use skyc_targets::cloud::{self, Catalog};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cloud::run::{ATTEMPT_TAG, Bucket, GROUP_TAG, POOL_TAG, RUN_TAG};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub group: String,
    /// Unique to this run (the submitting client makes it): letters,
    /// digits and `-`, at most 40.
    pub run: String,
    /// The spec's region: the group was priced and built for it.
    pub region: String,
    pub spec: GroupSpec,
    /// The spec's per-group requests, in order (`operation`, `request`).
    pub requests: Vec<(String, Value)>,
    /// Per task, per rank: the `RunInstances` request of the node.
    pub nodes: Vec<Vec<Value>>,
    /// How the runtime reaches the nodes, when it does (the data plane).
    #[serde(default)]
    pub ssh: Option<SshAccess>,
    /// The pool whose worker this is (its instances carry [`POOL_TAG`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The S3 bucket the run's files go through, when a task has files
    /// ([`crate::aws::control::files`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<Bucket>,
    /// Per task (by index), the `mounts.sh` its nodes are given when
    /// they mount S3 buckets (the spec's), with the run's credentials to
    /// mount them with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Option<String>>,
    /// Per task, the session policy (JSON) its nodes' credentials are
    /// narrowed by (the spec's `session_policy`: its mounted buckets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<Option<String>>,
}

/// What `skyc run --target aws` stores for a group: the run's plan and
/// how the runtime reaches its nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    /// With [`Plan::ssh`] set: the run's key pair and `tcp/22` rule.
    /// Flattened: the supervisor reads every plan's `spec`.
    #[serde(flatten)]
    pub plan: Plan,
    /// The run's private key (mode 0600), made by the submitting client.
    pub key: PathBuf,
    /// The image's login user.
    pub user: String,
    /// Reach nodes at their private addresses even when they have public
    /// ones (a runtime inside the VPC).
    #[serde(default)]
    pub private: bool,
    /// The nodes' SSH port, when not 22.
    #[serde(default)]
    pub port: Option<u16>,
    /// Where the run's credentials come from, and the endpoint the
    /// submitting client found: the supervisor asks that source itself
    /// (no secret is stored). A plan stored by an older skyc kept
    /// `settings` with the credentials: only its profile, region and
    /// endpoint are read.
    #[serde(alias = "settings")]
    pub access: Access,
    /// Per task, the values of its `secrets`, written to each of its
    /// instances.
    #[serde(default)]
    pub secrets: Vec<Vec<(String, String)>>,
    /// A pool's worker: its nodes hold after setup, running the jobs the
    /// runtime hands them (docs/pools.md). Its store row's role, set when
    /// the backend adopts it (not stored).
    #[serde(skip)]
    pub hold: bool,
}

/// The run's SSH access to its nodes: the public half of the key the
/// runtime made for the run (imported as the run's key pair, named by
/// every launch), and where the runtime connects from (a `tcp/22` rule of
/// the run's security group).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshAccess {
    /// One OpenSSH public key line (`ssh-ed25519 AAAA... comment`).
    pub public_key: String,
    /// An IPv4 CIDR (`203.0.113.7/32`).
    pub from: String,
}

/// A spec the runtime cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError(pub String);

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

/// Whether `run` can be a run id.
pub fn valid_run(run: &str) -> bool {
    !run.is_empty()
        && run.len() <= 40
        && run.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Plan {
    /// What the cloud runtime reads of the plan.
    pub fn as_run(&self) -> Run<'_> {
        Run {
            group: &self.group,
            run: &self.run,
            spec: &self.spec,
            bucket: self.bucket.as_ref(),
        }
    }

    /// Task `index`'s `mounts.sh`, when its nodes mount buckets.
    pub fn mounts(&self, index: usize) -> Option<&str> {
        self.mounts.get(index)?.as_deref()
    }

    /// Task `index`'s session policy, when its nodes mount buckets.
    pub fn policy(&self, index: usize) -> Option<&str> {
        self.policies.get(index)?.as_deref()
    }

    /// The plan of `spec` (the document of `skyc build --target aws`),
    /// for a run `run` of the group whose engine spec is `group_spec`.
    pub fn from_spec(doc: &Value, group_spec: GroupSpec, run: &str) -> Result<Plan, PlanError> {
        let fail = |why: String| Err(PlanError(why));
        if !valid_run(run) {
            return fail(format!(
                "`{run}` is not a run id (letters, digits, `-`, at most 40)"
            ));
        }
        if doc["kind"] != skyc_targets::cloud::KIND || doc["cloud"] != "aws" {
            return fail("not an AWS instance spec (`kind: CloudInstances`, `cloud: aws`)".into());
        }
        let (Some(group), Some(region)) = (doc["group"].as_str(), doc["region"].as_str()) else {
            return fail("the spec has no `group` or `region`".into());
        };
        // A pipeline's spec says so; one built before pipelines were
        // lowered has no `execution` and is a Job Group's.
        let built = match doc["execution"].as_str().unwrap_or("parallel") {
            "parallel" => Execution::Parallel,
            "serial" => Execution::Serial,
            other => return fail(format!("unknown `execution: {other}`")),
        };
        if built != group_spec.execution {
            return fail(format!(
                "the spec's `execution` ({built:?}) is not the group's ({:?})",
                group_spec.execution
            ));
        }
        let mut requests = Vec::new();
        for r in doc["requests"].as_array().into_iter().flatten() {
            let (Some(op), Some(body)) = (r["operation"].as_str(), r.get("request")) else {
                return fail("a group request without `operation` and `request`".into());
            };
            requests.push((op.to_owned(), body.clone()));
        }
        let mut nodes: Vec<Vec<Value>> = group_spec
            .tasks
            .iter()
            .map(|t| vec![Value::Null; t.num_nodes as usize])
            .collect();
        let mut mounts: Vec<Option<String>> = Vec::new();
        let mut policies: Vec<Option<String>> = Vec::new();
        for n in doc["nodes"].as_array().into_iter().flatten() {
            let task = n["task"].as_str().unwrap_or_default();
            let Some(t) = group_spec.tasks.iter().position(|s| s.name == task) else {
                return fail(format!("node of an unknown task `{task}`"));
            };
            let rank = n["rank"].as_u64().unwrap_or(u64::MAX);
            let Some(slot) = nodes[t].get_mut(rank as usize) else {
                return fail(format!("task `{task}` has no rank {rank}"));
            };
            if n["launch"]["operation"] != "RunInstances" {
                return fail(format!(
                    "node {task}-{rank} is not launched by RunInstances"
                ));
            }
            *slot = n["launch"]["request"].clone();
            if let Some(m) = n["mounts"].as_str() {
                if mounts.len() <= t {
                    mounts.resize(t + 1, None);
                }
                mounts[t] = Some(m.to_owned());
            }
            if n["session_policy"].is_object() {
                if policies.len() <= t {
                    policies.resize(t + 1, None);
                }
                policies[t] = Some(n["session_policy"].to_string());
            }
        }
        for (t, ranks) in nodes.iter().enumerate() {
            if let Some(rank) = ranks.iter().position(|r| !r.is_object()) {
                return fail(format!(
                    "the spec has no request for node {}-{rank}",
                    group_spec.tasks[t].name
                ));
            }
        }
        Ok(Plan {
            group: group.to_owned(),
            run: run.to_owned(),
            region: region.to_owned(),
            spec: group_spec,
            requests,
            nodes,
            ssh: None,
            pool: None,
            bucket: None,
            mounts,
            policies,
        })
    }

    /// The run's key pair (with [`Plan::ssh`]).
    pub fn key_pair(&self) -> String {
        format!("skyc-{}-{}", self.group, self.run)
    }

    /// The rule that lets the runtime reach the nodes' SSH, with
    /// [`Plan::ssh`].
    pub fn authorize_ssh(&self, id: &str) -> Option<Value> {
        let ssh = self.ssh.as_ref()?;
        Some(json!({
            "GroupId": id,
            "IpPermissions": [{
                "IpProtocol": "tcp",
                "FromPort": 22,
                "ToPort": 22,
                "IpRanges": [{"CidrIp": ssh.from, "Description": "the skyc runtime"}],
            }],
        }))
    }

    /// The run's security group.
    pub fn security_group(&self) -> String {
        format!("skyc-{}-{}", self.group, self.run)
    }

    /// The run's name for a placement group the build named `name`.
    pub fn placement_group(&self, name: &str) -> String {
        format!("{name}-{}", self.run)
    }

    /// The placement groups the build asks for, under the run's names.
    pub fn placement_groups(&self) -> Vec<(String, Value)> {
        self.requests
            .iter()
            .filter(|(op, _)| op == "CreatePlacementGroup")
            .filter_map(|(_, r)| {
                let name = r["GroupName"].as_str()?;
                let mut r = r.clone();
                let run_name = self.placement_group(name);
                r["GroupName"] = json!(run_name);
                self.tag(&mut r, &[]);
                Some((run_name, r))
            })
            .collect()
    }

    /// The `CreateSecurityGroup` request, under the run's name and tags.
    pub fn create_security_group(&self) -> Value {
        let mut r = self
            .requests
            .iter()
            .find(|(op, _)| op == "CreateSecurityGroup")
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| json!({"Description": format!("skyc Job Group {}", self.group)}));
        r["GroupName"] = json!(self.security_group());
        self.tag(&mut r, &[]);
        r
    }

    /// The `AuthorizeSecurityGroupIngress` request, naming the run's
    /// group by id (`id`) wherever the build named the group's.
    pub fn authorize_ingress(&self, id: &str) -> Option<Value> {
        let built = format!("skyc-{}", self.group);
        let (_, r) = self
            .requests
            .iter()
            .find(|(op, _)| op == "AuthorizeSecurityGroupIngress")?;
        let mut r = r.clone();
        if let Some(obj) = r.as_object_mut() {
            obj.remove("GroupName");
            obj.insert("GroupId".into(), json!(id));
        }
        for perm in r["IpPermissions"].as_array_mut().into_iter().flatten() {
            for pair in perm["UserIdGroupPairs"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                if pair["GroupName"] == built.as_str()
                    && let Some(obj) = pair.as_object_mut()
                {
                    obj.remove("GroupName");
                    obj.insert("GroupId".into(), json!(id));
                }
            }
        }
        Some(r)
    }

    /// The `RunInstances` request of a node's attempt: the build's, in
    /// the run's security group (`sg`, by id) and placement group, with
    /// the run's tags and the attempt's `ClientToken`.
    pub fn run_instances(&self, task: usize, rank: u32, attempt: u32, sg: &str) -> Value {
        let mut r = self.nodes[task][rank as usize].clone();
        if let Some(obj) = r.as_object_mut() {
            obj.remove("SecurityGroups");
            obj.insert("SecurityGroupIds".into(), json!([sg]));
            obj.insert(
                "ClientToken".into(),
                json!(client_token(
                    &self.run,
                    &self.spec.tasks[task].name,
                    rank,
                    attempt
                )),
            );
        }
        if let Some(name) = r["Placement"]["GroupName"].as_str() {
            r["Placement"]["GroupName"] = json!(self.placement_group(name));
        }
        if self.ssh.is_some() {
            r["KeyName"] = json!(self.key_pair());
        }
        let attempt = attempt.to_string();
        match &self.pool {
            Some(pool) => self.tag(&mut r, &[(ATTEMPT_TAG, &attempt), (POOL_TAG, pool)]),
            None => self.tag(&mut r, &[(ATTEMPT_TAG, &attempt)]),
        }
        r
    }

    /// Adds the run's tag (and `extra`) to every tag specification of a
    /// request, or a specification for `instance`-less requests.
    fn tag(&self, request: &mut Value, extra: &[(&str, &str)]) {
        let mut tags = vec![json!({"Key": RUN_TAG, "Value": self.run})];
        tags.extend(extra.iter().map(|(k, v)| json!({"Key": k, "Value": v})));
        match request["TagSpecifications"].as_array_mut() {
            Some(specs) => {
                for spec in specs {
                    if let Some(list) = spec["Tags"].as_array_mut() {
                        list.retain(|t| {
                            t["Key"] != RUN_TAG && !extra.iter().any(|(k, _)| t["Key"] == *k)
                        });
                        list.extend(tags.iter().cloned());
                    }
                }
            }
            None => {
                let resource = if request.get("Strategy").is_some() {
                    "placement-group"
                } else {
                    "security-group"
                };
                let mut all = vec![json!({"Key": GROUP_TAG, "Value": self.group})];
                all.extend(tags);
                request["TagSpecifications"] = json!([{"ResourceType": resource, "Tags": all}]);
            }
        }
    }
}

/// The `ClientToken` of one node's attempt: the same for the same run,
/// task, rank and attempt, whoever computes it and however often, and
/// different otherwise (a new attempt must launch a new instance; a token
/// reused would return the old one). At most 64 ASCII characters, as EC2
/// requires.
pub fn client_token(run: &str, task: &str, rank: u32, attempt: u32) -> String {
    let input = format!("{run}\n{task}\n{rank}\n{attempt}");
    let hash = digest::digest(&digest::SHA256, input.as_bytes());
    format!("skyc-{}", &crate::aws::ec2::sigv4::hex(hash.as_ref())[..40])
}

/// What `skyc run --target aws` asks of a run beside its group.
pub struct RunOptions<'a> {
    /// Between SIGTERM and SIGKILL when a task is terminated.
    pub grace: Duration,
    /// `--secret` values, then the submitting environment's.
    pub secrets: &'a [(String, String)],
    /// The state directory: the run's key is made in `aws/{run}` there.
    pub state_dir: &'a Path,
    pub submitted_ms: i64,
    /// The image's login user.
    pub user: String,
    /// Where the runtime connects from (`--ssh-from`); `None` is this
    /// machine's address on its default route.
    pub ssh_from: Option<String>,
    /// Reach nodes at their private addresses.
    pub private: bool,
    /// The tasks' files as the submission took them, with their streams'
    /// SHA-256s; `None` when none were read (they are then reported as
    /// not delivered).
    pub files: Option<&'a skyc_targets::files::Files>,
}

impl RunPlan {
    /// Plans a run of `group` on AWS, priced from `catalog`: the build's
    /// spec with the run's names, the credentials' source (EC2 must
    /// answer with them before the group is recorded: a group that cannot
    /// reach it never looks alive), the run's SSH key and the tasks'
    /// secrets. No plan when the diagnostics hold an error.
    pub fn for_run(
        group: &Group,
        catalog: &Catalog,
        options: &RunOptions<'_>,
    ) -> Result<(Option<RunPlan>, Vec<Diagnostic>), String> {
        let built = cloud::build_with_files(group, catalog, options.files);
        let mut diagnostics = built.diagnostics;
        // Each task's secrets, written to its instances by the runtime
        // (they never enter the spec or the user data).
        let secrets: Vec<Vec<(String, String)>> = group
            .tasks
            .iter()
            .map(|task| {
                let (found, missing) = crate::secrets::resolve(task, options.secrets);
                diagnostics.extend(missing);
                found
            })
            .collect();
        let Some(doc) = built
            .document
            .filter(|_| !diagnostics.iter().any(Diagnostic::is_error))
        else {
            return Ok((None, diagnostics));
        };
        let run = crate::backend::run_token(options.submitted_ms);
        let mut plan = Plan::from_spec(&doc, GroupSpec::from_ir(group, options.grace), &run)
            .map_err(|e| format!("the instance spec: {e}"))?;

        if let Some(files) = options.files.filter(|f| f.any()) {
            if let Some((m, p)) = files.tasks.iter().flatten().find_map(|m| {
                let p = files.packs.get(&m.taken.digest)?;
                (p.bytes > crate::aws::s3::MAX_PUT_BYTES).then_some((m, p))
            }) {
                return Err(format!(
                    "`{}` makes a stream of {:.1} GiB; S3 takes at most 5 GiB in one upload, \
                     and skyc sends each workdir or file mount whole: split it into several \
                     mounts, or fetch it in `setup`",
                    m.source,
                    p.bytes as f64 / f64::from(1u32 << 30)
                ));
            }
            plan.bucket = Some(Bucket {
                name: crate::aws::control::files::bucket_name(&plan.group),
                files: crate::files::pack::packed(files),
                tasks: (0..group.tasks.len())
                    .map(|i| files.digests_of(i).into_iter().map(str::to_owned).collect())
                    .collect(),
            });
        }
        let access = reach(&plan)?;
        let from = match &options.ssh_from {
            Some(cidr) => cidr.clone(),
            None => default_route_address()?,
        };
        let key_dir = std::path::absolute(options.state_dir.join("aws").join(&run))
            .map_err(|e| format!("the run's key: {e}"))?;
        let key = make_key(&key_dir, &plan.key_pair())?;
        let public_key = std::fs::read_to_string(key.with_extension("pub"))
            .map_err(|e| format!("the run's key: {e}"))?;
        plan.ssh = Some(SshAccess {
            public_key: public_key.trim().to_owned(),
            from,
        });
        let run = RunPlan {
            plan,
            key,
            user: options.user.clone(),
            private: options.private,
            port: None,
            access,
            secrets,
            hold: false,
        };
        Ok((Some(run), diagnostics))
    }

    /// The plan a client made, made the controller's: the run's SSH key
    /// made again in the controller's state directory `state_dir` (the
    /// client's never leaves it), the nodes' `tcp/22` opened to `from`
    /// (the controller's address; else its default route's), and the
    /// credentials the controller's own (`access`: its instance
    /// profile), not the client's.
    pub fn for_controller(
        &mut self,
        state_dir: &Path,
        from: Option<String>,
        access: Access,
    ) -> Result<(), String> {
        if !valid_run(&self.plan.run) {
            return Err(format!("`{}` is not a run id", self.plan.run));
        }
        // Nodes that mount buckets are given the run's credentials
        // narrowed by STS; the instance profile's cannot be, and the
        // controller's own must not reach a node.
        if self.plan.mounts.iter().any(Option::is_some) {
            return Err(
                "a task mounts S3 buckets, and a controller on AWS cannot give its \
                        nodes credentials narrowed to them yet: copy them (`mode: COPY`), or \
                        run the group without a controller"
                    .into(),
            );
        }
        let key_dir = std::path::absolute(state_dir.join("aws").join(&self.plan.run))
            .map_err(|e| format!("the run's key: {e}"))?;
        if key_dir.exists() {
            return Err(format!("run {} is already here", self.plan.run));
        }
        self.key = make_key(&key_dir, &self.plan.key_pair())?;
        let public_key = std::fs::read_to_string(self.key.with_extension("pub"))
            .map_err(|e| format!("the run's key: {e}"))?;
        let from = match from {
            Some(from) => from,
            None => default_route_address()?,
        };
        self.plan.ssh = Some(SshAccess {
            public_key: public_key.trim().to_owned(),
            from,
        });
        self.access = access;
        Ok(())
    }

    /// Whether the credentials are the submitting environment's keys,
    /// which nothing renews.
    pub fn credentials_from_environment(&self) -> bool {
        self.access.source == Source::Environment
    }
}

/// The AWS configuration as this process finds it, once EC2 has
/// answered with its credentials: one `DescribeInstances` of the plan's
/// run (new, so empty). For the submitting client, before it records a
/// group.
fn reach(plan: &Plan) -> Result<Access, String> {
    let (access, chain) = Access::from_env().map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let fetched = rt
        .block_on(chain.fetch(&access, &plan.region))
        .map_err(|e| match &access.source {
            // Asked last because nothing else is configured: most likely
            // not on EC2 at all.
            Source::InstanceMetadata { endpoint: None } => format!(
                "{}; the instance metadata service, asked last, gave none: {e}",
                ConfigError::NoCredentials {
                    profile: access.profile.clone()
                }
            ),
            _ => format!("cannot get AWS credentials from {}: {e}", chain.describe()),
        })?;
    let settings = access.settings(fetched.credentials, &chain);
    let ec2 =
        Ec2::new(&settings, Some(&plan.region), Tuning::default()).map_err(|e| e.to_string())?;
    rt.block_on(ops::instances(&ec2, &plan.run))
        .map_err(|e| e.to_string())?;
    Ok(access)
}

/// This machine's address on its default route, as a /32: what the
/// nodes see the runtime connect from. No packet is sent (a UDP
/// socket's connect only chooses the route).
fn default_route_address() -> Result<String, String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    socket
        .connect("192.0.2.1:22")
        .and_then(|()| socket.local_addr())
        .map(|a| format!("{}/32", a.ip()))
        .map_err(|e| format!("this machine has no default route ({e}); give --ssh-from CIDR"))
}

/// Makes the run's SSH key pair in `dir` (private to this user):
/// `id_ed25519` and `id_ed25519.pub`; returns the private key's path.
pub(crate) fn make_key(dir: &Path, comment: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let key = dir.join("id_ed25519");
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(&key)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ssh-keygen (OpenSSH's client is needed): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ssh-keygen could not make the run's key: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(key)
}
