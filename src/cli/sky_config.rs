//! SkyPilot's configuration where skyc reads it: `jobs.controller` of
//! `~/.sky/config.yaml` (`$SKYPILOT_CONFIG`), its resources, autostop and
//! high availability, and `kubernetes.high_availability`. A user who
//! configured SkyPilot's jobs controller has asked for one: `skyc run`
//! (or `pool apply`) to a controller's state makes skyc's when none is
//! there, shaped by the same keys (docs/controller.md, "Started by the
//! first run").

use skyc_compiler::Diagnostic;
use skyc_compiler::yaml::{Budget, Node, Reader, Value};
use skyc_targets::cloud::controller::Controller as OnAws;
use skyc_targets::k8s::controller::Controller as OnKubernetes;
use std::path::PathBuf;

/// SkyPilot's `jobs.controller`, as it was written.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct JobsController {
    /// The file it was read from, for messages.
    pub(crate) file: String,
    /// `resources.infra`'s cloud (or `cloud`), lowercased.
    cloud: Option<String>,
    region: Option<String>,
    instance_type: Option<String>,
    disk_gb: Option<u64>,
    cpus: Option<String>,
    memory: Option<String>,
    /// `resources` keys skyc takes on no target.
    unread: Vec<&'static str>,
    autostop: Autostop,
    high_availability: bool,
    /// `kubernetes.high_availability.storage_class_name`.
    storage_class: Option<String>,
}

/// `resources.autostop` (or the older `jobs.controller.autostop`).
#[derive(Debug, Default, PartialEq, Eq)]
enum Autostop {
    /// SkyPilot's: 10 idle minutes, stopped.
    #[default]
    Default,
    Never,
    After {
        minutes: u64,
        down: bool,
    },
}

/// The configuration file: `$SKYPILOT_CONFIG`, else `~/.sky/config.yaml`.
fn path() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    var("SKYPILOT_CONFIG")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".sky/config.yaml")))
}

/// The configured jobs controller; `None` when no file or no
/// `jobs.controller` section is there.
pub(crate) fn jobs_controller() -> Result<Option<JobsController>, String> {
    let Some(path) = path() else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    read(&text, &path.display().to_string())
}

/// [`jobs_controller`] of the text of `file`.
pub(crate) fn read(text: &str, file: &str) -> Result<Option<JobsController>, String> {
    let mut diagnostics = skyc_compiler::Diagnostics::default();
    let documents = Reader::read(text, Budget::default(), &mut diagnostics);
    if diagnostics.has_errors() {
        let first = diagnostics
            .into_sorted()
            .into_iter()
            .find(Diagnostic::is_error)
            .map(|d| d.message)
            .unwrap_or_default();
        return Err(format!("{file}: not YAML: {first}"));
    }
    let root = documents.first().map(|d| &d.root);
    let Some(section) = root
        .and_then(|r| r.get("jobs"))
        .and_then(|j| j.get("controller"))
        .filter(|c| !c.is_null())
    else {
        return Ok(None);
    };
    let bad = |key: &str, what: &str| format!("{file}: jobs.controller.{key}: {what}");
    let mut c = JobsController {
        file: file.to_owned(),
        ..JobsController::default()
    };
    let text_of = |node: Option<&Node>, key: &str| -> Result<Option<String>, String> {
        match node.filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => v
                .python_str()
                .map(Some)
                .ok_or_else(|| bad(key, "not a string")),
        }
    };
    let resources = section.get("resources").filter(|r| !r.is_null());
    if let Some(resources) = resources {
        let text = |key: &str| text_of(resources.get(key), &format!("resources.{key}"));
        match text("infra")? {
            Some(infra) => {
                let mut parts = infra.split('/');
                c.cloud = parts.next().map(str::to_ascii_lowercase);
                c.region = parts.next().filter(|r| !r.is_empty()).map(str::to_owned);
            }
            None => {
                c.region = text("region")?;
                c.cloud = text("cloud")?.map(|c| c.to_ascii_lowercase());
            }
        }
        c.instance_type = text("instance_type")?;
        c.cpus = text("cpus")?;
        c.memory = text("memory")?;
        if let Some(disk) = text("disk_size")? {
            // SkyPilot's: GB, or a size with its unit (`100GB`, `1TB`).
            c.disk_gb = Some(
                skyc_compiler::parse_disk_size(&disk)
                    .map_err(|e| bad("resources.disk_size", &e))?,
            );
        }
        for key in ["accelerators", "use_spot"] {
            if resources.get(key).is_some_and(|v| !v.is_null()) {
                c.unread.push(key);
            }
        }
    }
    // SkyPilot reads `resources.autostop`, and the older
    // `jobs.controller.autostop` only when that is not given.
    let (autostop, key) = match resources.and_then(|r| r.get("autostop")) {
        Some(a) if !a.is_null() => (Some(a), "resources.autostop"),
        _ => (section.get("autostop"), "autostop"),
    };
    if let Some(autostop) = autostop {
        c.autostop = read_autostop(autostop).map_err(|what| bad(key, &what))?;
    }
    c.high_availability = matches!(
        section.get("high_availability").map(|n| &n.value),
        Some(Value::Bool(true))
    );
    c.storage_class = text_of(
        root.and_then(|r| r.get("kubernetes"))
            .and_then(|k| k.get("high_availability"))
            .and_then(|h| h.get("storage_class_name")),
        "kubernetes.high_availability.storage_class_name",
    )?;
    Ok(Some(c))
}

/// SkyPilot's autostop forms: a boolean, minutes (`5`, `"30m"`, `"2h"`),
/// or `{idle_minutes, down, ...}`. Enabled without minutes is 0, which
/// SkyPilot takes as one minute ([`Autostop::seconds`]).
fn read_autostop(node: &Node) -> Result<Autostop, String> {
    let minutes = |n: &Node| -> Result<u64, String> {
        if let Some(m) = n.as_i64() {
            return u64::try_from(m).map_err(|_| "not a number of minutes".to_owned());
        }
        n.python_str()
            .as_deref()
            .and_then(time_minutes)
            .ok_or_else(|| "not a time (`30m`, `2h`, minutes)".to_owned())
    };
    match &node.value {
        Value::Null => Ok(Autostop::Default),
        Value::Bool(true) => Ok(Autostop::After {
            minutes: 0,
            down: false,
        }),
        Value::Bool(false) => Ok(Autostop::Never),
        Value::Map(_) => {
            let down = matches!(node.get("down").map(|d| &d.value), Some(Value::Bool(true)));
            let minutes = match node.get("idle_minutes").filter(|m| !m.is_null()) {
                Some(m) => minutes(m).map_err(|e| format!("idle_minutes: {e}"))?,
                None => 0,
            };
            Ok(Autostop::After { minutes, down })
        }
        _ => Ok(Autostop::After {
            minutes: minutes(node)?,
            down: false,
        }),
    }
}

impl Autostop {
    /// The idle time, in seconds; `None`: never stopped.
    fn seconds(&self) -> Option<u64> {
        match self {
            Autostop::Default => Some(skyc_targets::cloud::controller::DEFAULT_IDLE_SECONDS),
            Autostop::Never => None,
            // 0 would stop it before its first group arrives: SkyPilot
            // makes it a minute.
            Autostop::After { minutes, .. } => Some((*minutes).max(1).saturating_mul(60)),
        }
    }
}

/// SkyPilot's time in minutes: a number of minutes, or one with `m`, `h`,
/// `d` or `w` (fractions rounded up).
fn time_minutes(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok();
    }
    let (number, per) = [
        ("m", 1.0),
        ("h", 60.0),
        ("d", 24.0 * 60.0),
        ("w", 7.0 * 24.0 * 60.0),
    ]
    .into_iter()
    .find_map(|(unit, per)| Some((s.strip_suffix(unit)?, per)))?;
    let value: f64 = number.parse().ok()?;
    let minutes = (value * per).ceil();
    (value.is_finite() && (0.0..=u64::MAX as f64).contains(&minutes)).then_some(minutes as u64)
}

impl JobsController {
    fn unread_notes(&self, notes: &mut Vec<String>) {
        for key in &self.unread {
            notes.push(format!(
                "resources.{key} is not read: skyc's controller needs none"
            ));
        }
    }

    /// skyc's controller on AWS as the keys shape it, and a line for each
    /// key it does not take.
    pub(crate) fn on_aws(&self) -> (OnAws, Vec<String>) {
        let mut c = OnAws {
            region: self.region.clone(),
            instance_type: self.instance_type.clone(),
            ..OnAws::default()
        };
        let mut notes = Vec::new();
        if let Some(cloud) = self.cloud.as_deref().filter(|c| *c != "aws") {
            notes.push(format!(
                "its resources are on {cloud}: skyc's controller here is on aws"
            ));
        }
        if let Some(disk) = self.disk_gb {
            c.disk_gb = disk;
        }
        for (key, given) in [("cpus", &self.cpus), ("memory", &self.memory)] {
            if given.is_some() {
                notes.push(format!(
                    "resources.{key} is not read: skyc's controller takes SkyPilot's default \
                     resources (cpus: 4+, memory: 4x), or resources.instance_type"
                ));
            }
        }
        self.unread_notes(&mut notes);
        c.idle_seconds = self.autostop.seconds().unwrap_or(u64::MAX);
        match self.autostop {
            Autostop::Default | Autostop::Never => {}
            Autostop::After { down, .. } => {
                if down {
                    notes.push(
                        "autostop.down is not read: an idle controller is stopped, its state \
                         kept"
                            .into(),
                    );
                }
            }
        }
        (c, notes)
    }

    /// skyc's controller on Kubernetes as the keys shape it (its pod's
    /// CPU and memory, its state claim's size and class), and a line for
    /// each key it does not take. Without them, skyc's own pod size
    /// (it needs far less than SkyPilot's default of 4 CPUs).
    pub(crate) fn on_kubernetes(&self) -> Result<(OnKubernetes, Vec<String>), String> {
        let mut c = OnKubernetes {
            storage_class: self.storage_class.clone(),
            ..OnKubernetes::default()
        };
        let mut notes = Vec::new();
        let bad = |key: &str, value: &str, what: &str| {
            format!(
                "{}: jobs.controller.resources.{key}: `{value}` is {what}",
                self.file
            )
        };
        if let Some(cloud) = self
            .cloud
            .as_deref()
            .filter(|c| !matches!(*c, "kubernetes" | "k8s"))
        {
            notes.push(format!(
                "its resources are on {cloud}: skyc's controller here is on Kubernetes"
            ));
        }
        // SkyPilot's Kubernetes instance types: `4CPU--16GB[--ACC:N]`.
        let typed = self.instance_type.as_deref().map(|t| {
            let mut parts = t.split("--");
            let cpus = parts.next().and_then(|p| cpus_of(p.strip_suffix("CPU")?));
            let gb = parts.next().and_then(|p| memory_gb(p.strip_suffix("GB")?));
            if parts.next().is_some() {
                notes.push(format!(
                    "resources.instance_type {t}: its accelerators are not read: skyc's \
                     controller needs none"
                ));
            }
            cpus.zip(gb).ok_or_else(|| {
                bad(
                    "instance_type",
                    t,
                    "not a Kubernetes instance type (`4CPU--16GB`)",
                )
            })
        });
        let cpus = match self.cpus.as_deref() {
            Some(cpus) => {
                Some(cpus_of(cpus).ok_or_else(|| bad("cpus", cpus, "not a number of CPUs"))?)
            }
            None => None,
        };
        // SkyPilot fills what is not given from its own (`cpus: 4+`,
        // `memory: 4x`): memory follows the CPUs.
        let memory = |per_cpu_of: f64| -> Result<Option<f64>, String> {
            match self.memory.as_deref() {
                Some(memory) => {
                    let plain = memory.strip_suffix('+').unwrap_or(memory);
                    let gb = match plain.strip_suffix('x') {
                        Some(per) => memory_gb(per).map(|per| per * per_cpu_of),
                        None => memory_gb(plain),
                    };
                    gb.map(Some).ok_or_else(|| {
                        bad("memory", memory, "not memory (`16`, `16GB`, `4x` per CPU)")
                    })
                }
                None => Ok(None),
            }
        };
        let (cpu, gb) = match (typed.transpose()?, cpus) {
            (Some(typed), _) => (Some(typed.0), Some(typed.1)),
            (None, Some(cpus)) => (Some(cpus), Some(memory(cpus)?.unwrap_or(4.0 * cpus))),
            (None, None) => {
                let gb = memory(SKYPILOT_CPUS)?;
                if gb.is_some() {
                    notes.push(format!(
                        "resources.cpus is not given: the pod's CPU is skyc's ({}), not \
                         SkyPilot's {SKYPILOT_CPUS}",
                        c.cpu
                    ));
                }
                (None, gb)
            }
        };
        if let Some(cpu) = cpu {
            c.cpu = quantity(cpu);
        }
        if let Some(gb) = gb {
            c.memory = memory_quantity(gb);
        }
        if let Some(disk) = self.disk_gb {
            c.storage = format!("{disk}Gi");
        }
        self.unread_notes(&mut notes);
        if !matches!(self.autostop, Autostop::Default) {
            notes.push(
                "autostop is not read on Kubernetes: the controller's pod waits, small, for \
                 the next group"
                    .into(),
            );
        }
        if !self.high_availability {
            notes.push(
                "high_availability is not set, and skyc's controller has it all the same: a \
                 Deployment whose state claim outlives its pod"
                    .into(),
            );
        }
        Ok((c, notes))
    }
}

/// The CPUs SkyPilot's jobs controller asks for when none are given
/// (`cpus: 4+`), which its `memory: Nx` multiplies.
const SKYPILOT_CPUS: f64 = 4.0;

/// CPUs as SkyPilot reads them (`2`, `2+`: at least is as many).
fn cpus_of(s: &str) -> Option<f64> {
    skyc_compiler::parse_cpus(s.trim()).ok().map(|q| q.value)
}

/// GB of memory as SkyPilot reads them (`16`, `16GB`, `512Mi`).
fn memory_gb(s: &str) -> Option<f64> {
    skyc_compiler::parse_memory(s.trim(), false)
        .ok()
        .map(|q| q.value)
}

/// A Kubernetes quantity of `gb` of memory: GiB, else MiB (rounded up).
fn memory_quantity(gb: f64) -> String {
    if gb.fract() == 0.0 {
        format!("{gb:.0}Gi")
    } else {
        format!("{:.0}Mi", (gb * 1024.0).ceil())
    }
}

/// A Kubernetes quantity of `n`: whole numbers as such, else in thousandths.
fn quantity(n: f64) -> String {
    if n.fract() == 0.0 {
        format!("{n:.0}")
    } else {
        format!("{:.0}m", (n * 1000.0).ceil())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Option<JobsController> {
        super::read(text, "config.yaml").unwrap()
    }

    #[test]
    fn the_jobs_controller_keys_shape_skycs_controller_on_aws() {
        assert_eq!(read("allowed_clouds: [aws]\n"), None);
        assert_eq!(read("jobs:\n  controller:\n"), None);
        let (c, notes) = read(
            "jobs:\n  controller:\n    resources:\n      infra: aws/us-west-2\n      \
             instance_type: m6id.large\n      disk_size: 80\n      autostop:\n        \
             idle_minutes: 30\n",
        )
        .unwrap()
        .on_aws();
        assert_eq!(
            c,
            OnAws {
                region: Some("us-west-2".into()),
                instance_type: Some("m6id.large".into()),
                disk_gb: 80,
                idle_seconds: 1800,
            }
        );
        assert!(notes.is_empty(), "{notes:?}");
        // SkyPilot's older spelling, and an autostop turned off.
        let (c, notes) = read(
            "jobs:\n  controller:\n    resources:\n      cloud: AWS\n      region: eu-west-1\n      \
             cpus: 8+\n    autostop: false\n",
        )
        .unwrap()
        .on_aws();
        assert_eq!(c.region.as_deref(), Some("eu-west-1"));
        assert_eq!(c.idle_seconds, u64::MAX);
        assert!(notes[0].contains("resources.cpus is not read"), "{notes:?}");
        let (_, notes) = read("jobs:\n  controller:\n    resources:\n      infra: gcp\n")
            .unwrap()
            .on_aws();
        assert!(notes[0].contains("on gcp"), "{notes:?}");
        // `resources.autostop` wins over the older key, in each of its
        // forms.
        // Enabled without minutes, or 0: SkyPilot's one minute.
        for (autostop, seconds) in [
            ("5", 300),
            ("'2h'", 7200),
            ("'1.5m'", 120),
            ("true", 60),
            ("{down: true}", 60),
            ("{wait_for: jobs}", 60),
            ("{}", 60),
            ("0", 60),
            // Not given there: the older key's (here `false`) decides.
            ("null", u64::MAX),
        ] {
            let (c, _) = read(&format!(
                "jobs:\n  controller:\n    autostop: false\n    resources:\n      \
                 autostop: {autostop}\n"
            ))
            .unwrap()
            .on_aws();
            assert_eq!(c.idle_seconds, seconds, "{autostop}");
        }
    }

    #[test]
    fn the_jobs_controller_keys_shape_skycs_controller_on_kubernetes() {
        let (c, notes) = read(
            "jobs:\n  controller:\n    high_availability: true\n    resources:\n      \
             infra: kubernetes\n      cpus: 2+\n      memory: 4x\n      disk_size: 20\n\
             kubernetes:\n  high_availability:\n    storage_class_name: shared\n",
        )
        .unwrap()
        .on_kubernetes()
        .unwrap();
        assert_eq!(
            (c.cpu.as_str(), c.memory.as_str(), c.storage.as_str()),
            ("2", "8Gi", "20Gi")
        );

        assert_eq!(c.storage_class.as_deref(), Some("shared"));
        assert_eq!(c.image, OnKubernetes::default().image);
        assert!(notes.is_empty(), "{notes:?}");
        // As SkyPilot fills them: CPUs alone take 4 GB each; memory with
        // units; a disk with its unit; `Nx` alone counts SkyPilot's 4 CPUs.
        let k8s = |resources: &str| {
            read(&format!(
                "jobs:\n  controller:\n    high_availability: true\n    resources:\n{resources}"
            ))
            .unwrap()
            .on_kubernetes()
            .unwrap()
        };
        let (c, _) = k8s("      cpus: 3\n      disk_size: 1TB\n");
        assert_eq!(
            (c.cpu.as_str(), c.memory.as_str(), c.storage.as_str()),
            ("3", "12Gi", "1024Gi")
        );
        let (c, _) = k8s("      cpus: 1\n      memory: 2048MB\n");
        assert_eq!(c.memory, "2Gi");
        let (c, notes) = k8s("      memory: 2x\n");
        assert_eq!((c.cpu.as_str(), c.memory.as_str()), ("500m", "8Gi"));
        assert!(
            notes[0].contains("resources.cpus is not given"),
            "{notes:?}"
        );
        let (c, notes) = k8s("      instance_type: 8CPU--32GB--H100:1\n");
        assert_eq!((c.cpu.as_str(), c.memory.as_str()), ("8", "32Gi"));
        assert!(notes[0].contains("accelerators"), "{notes:?}");
        // SkyPilot's Kubernetes instance type; half a CPU.
        let (c, _) = read("jobs:\n  controller:\n    resources:\n      instance_type: 2CPU--3GB\n")
            .unwrap()
            .on_kubernetes()
            .unwrap();
        assert_eq!((c.cpu.as_str(), c.memory.as_str()), ("2", "3Gi"));
        let (c, notes) = read(
            "jobs:\n  controller:\n    resources:\n      cpus: 0.5\n      memory: 1.5\n      \
             use_spot: true\n      autostop: 5\n",
        )
        .unwrap()
        .on_kubernetes()
        .unwrap();
        assert_eq!((c.cpu.as_str(), c.memory.as_str()), ("500m", "1536Mi"));
        let said = notes.join("\n");
        for key in ["use_spot", "autostop", "high_availability"] {
            assert!(said.contains(key), "{key}: {said}");
        }
        // What cannot be read is named with its key.
        for (yaml, key) in [
            ("cpus: many", "resources.cpus"),
            ("memory: lots", "resources.memory"),
            ("instance_type: m6i.large", "resources.instance_type"),
        ] {
            let e = read(&format!(
                "jobs:\n  controller:\n    resources:\n      {yaml}\n"
            ))
            .unwrap()
            .on_kubernetes()
            .unwrap_err();
            assert!(e.contains(key), "{e}");
        }
    }

    #[test]
    fn values_that_cannot_be_are_named() {
        let e = super::read(
            "jobs:\n  controller:\n    autostop:\n      idle_minutes: soon\n",
            "config.yaml",
        )
        .unwrap_err();
        assert!(e.contains("jobs.controller.autostop"), "{e}");
        let e = super::read(
            "jobs:\n  controller:\n    resources:\n      autostop: 3y\n",
            "config.yaml",
        )
        .unwrap_err();
        assert!(e.contains("jobs.controller.resources.autostop"), "{e}");
        for bad in ["'5é'", "'é'", "''", "'-3m'"] {
            let e = super::read(
                &format!("jobs:\n  controller:\n    autostop: {bad}\n"),
                "config.yaml",
            )
            .unwrap_err();
            assert!(e.contains("jobs.controller.autostop"), "{bad}: {e}");
        }
        let e = super::read(
            "jobs:\n  controller:\n    resources:\n      disk_size: 1.5GB\n",
            "config.yaml",
        )
        .unwrap_err();
        assert!(e.contains("resources.disk_size"), "{e}");
        let e = super::read("jobs: [\n", "config.yaml").unwrap_err();
        assert!(e.contains("not YAML"), "{e}");
    }
}
