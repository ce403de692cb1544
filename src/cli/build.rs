//! `skyc build FILE --target T`: lower a group to a target's artifacts.

use super::catalog;
use super::check::Color;
use super::k8s::K8sArgs;
use super::out::{self, errln};
use super::slurm::SlurmArgs;
use super::{INVALID, OK, USAGE, input, parse_env, report};
use clap::ValueEnum;
use skyc_compiler::ir::Execution;
use skyc_compiler::{Compilation, Diagnostic, Options, compile};
use skyc_targets::cloud::{self, Cloud};
use skyc_targets::k8s;
use skyc_targets::slurm;
use std::path::{Path, PathBuf};

/// Lower a Job Group to what a target runs.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The Job Group (or task) file; `-` reads standard input.
    #[arg(value_name = "FILE", required_unless_present = "controller")]
    file: Option<String>,
    /// What to build.
    #[arg(long, value_enum)]
    target: Target,
    /// Give an environment variable a value, as `sky jobs launch --env` does.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// When to colour diagnostics.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    color: Color,
    /// Output format of the manifests (k8s), the instance spec (aws, gcp)
    /// or the files' review (files).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Yaml)]
    output: Output,
    /// Write the output there instead of standard output: a directory with
    /// one file per object (k8s) or the group's instance spec (aws, gcp),
    /// the batch script's file (slurm), or for a pipeline a directory with
    /// each step's batch script and `submit.sh` (slurm).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// SkyPilot's catalog directory (aws, gcp): `DIR/aws/vms.csv`,
    /// `DIR/gcp/vms.csv`, as in ~/.sky/catalogs/v8. Default:
    /// $SKYC_CATALOG, then ~/.sky/catalogs/v8, then the snapshot skyc ships.
    #[arg(long, value_name = "DIR")]
    catalog: Option<PathBuf>,
    #[command(flatten)]
    k8s: K8sArgs,
    /// Also emit the Role `skyc run --target k8s` needs in the namespace,
    /// for a cluster administrator to bind (k8s).
    #[arg(long, help_heading = "Kubernetes")]
    rbac: bool,
    /// `jobset`: self-contained manifests for `kubectl apply`; `pods`:
    /// what `skyc run --target k8s` creates (an anchor JobSet, and each
    /// node's first pod), for review (k8s).
    #[arg(long, value_enum, default_value_t = Layout::Jobset, help_heading = "Kubernetes")]
    layout: Layout,
    /// Emit skyc's controller instead of a group: the objects that run the
    /// supervisor and its state in the namespace (k8s), or its instance,
    /// role and policy and the requests that make them (aws;
    /// docs/controller.md).
    #[arg(long, conflicts_with_all = ["file", "rbac"], help_heading = "Controller")]
    controller: bool,
    #[command(flatten)]
    controller_args: super::controller::ControllerArgs,
    #[command(flatten)]
    slurm: SlurmArgs,
    /// Seconds between SIGTERM and SIGKILL when a task is terminated
    /// (slurm), as `skyc run --grace`.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    grace: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// skyc's intermediate representation, as JSON.
    Ir,
    /// A JobSet and the ConfigMap its pods run from, for Kubernetes.
    K8s,
    /// A Slurm batch script: one heterogeneous job, one component per task;
    /// for a pipeline, a script that submits one batch job per step.
    Slurm,
    /// AWS instance specs: instances chosen from SkyPilot's catalog, and
    /// the EC2 requests that launch them.
    Aws,
    /// GCP instance specs: instances chosen from SkyPilot's catalog, and
    /// the Compute Engine requests that launch them.
    Gcp,
    /// The tasks' code and data as `skyc run` sends them: each `workdir`
    /// and local file mount (source, destination, files, bytes, digest),
    /// read as a run reads them, and the volumes each task needs.
    Files,
}

impl Target {
    fn cloud(self) -> Option<Cloud> {
        match self {
            Target::Aws => Some(Cloud::Aws),
            Target::Gcp => Some(Cloud::Gcp),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Layout {
    Jobset,
    Pods,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Yaml,
    Json,
}

pub(crate) fn run(args: &Args) -> u8 {
    if args.rbac && !matches!(args.target, Target::K8s) {
        errln!("error: --rbac is for the k8s target");
        return USAGE;
    }
    if args.layout == Layout::Pods && !matches!(args.target, Target::K8s) {
        errln!("error: --layout is for the k8s target");
        return USAGE;
    }
    if args.controller {
        return controller(args);
    }
    let mut k8s_options = match args.k8s.options() {
        Ok(options) => options,
        Err(message) if matches!(args.target, Target::K8s) => {
            errln!("error: {message}");
            return USAGE;
        }
        Err(_) => Default::default(),
    };
    let catalog = match args.target.cloud() {
        Some(cloud) => match catalog::load(cloud, args.catalog.as_deref()) {
            Ok(c) => Some(c),
            Err(message) => {
                errln!("error: {message}");
                return USAGE;
            }
        },
        None => None,
    };
    let (name, bytes) = match input::read(args.file.as_deref().unwrap_or("-")) {
        Ok(read) => read,
        Err(message) => {
            errln!("error: {message}");
            return USAGE;
        }
    };
    let options = Options {
        env: args.env.clone(),
    };
    let mut compilation = compile(&name, &bytes, &options);
    // The k8s target's manifests carry the tasks' files; a source that
    // cannot be read is an error, and nothing is lowered.
    let mut files_failed = false;
    if let (Some(group), Target::K8s) = (&compilation.group, args.target) {
        let with_data = args.layout == Layout::Jobset && group.pool.is_none();
        match super::files::packed(group, with_data) {
            Ok((files, diagnostics)) => {
                files_failed = diagnostics.iter().any(Diagnostic::is_error);
                add_diagnostics(&mut compilation, diagnostics);
                k8s_options.files = Some(files);
            }
            Err(message) => {
                errln!("error: {message}");
                return USAGE;
            }
        }
    }
    let mut objects = Vec::new();
    let mut script = None;
    let mut pipeline = None;
    let mut spec = None;
    let mut files = None;
    match (&compilation.group, args.target) {
        _ if files_failed => {}
        (Some(group), Target::Files) => match super::files::review(group) {
            Ok((review, diagnostics)) => {
                add_diagnostics(&mut compilation, diagnostics);
                files = Some(review);
            }
            Err(message) => {
                errln!("error: {message}");
                return USAGE;
            }
        },
        // A pool file: what `skyc pool apply --target k8s` would start.
        (Some(group), Target::K8s) if group.pool.is_some() => {
            match super::k8s::pool_manifests(group, &k8s_options) {
                Ok(Ok(all)) => objects = all,
                Ok(Err(diagnostics)) => add_diagnostics(&mut compilation, diagnostics),
                Err(message) => {
                    errln!("error: {message}");
                    return USAGE;
                }
            }
            if args.rbac && !objects.is_empty() {
                objects.insert(0, k8s::rbac::role(k8s_options.namespace.as_deref()));
            }
        }
        (Some(group), Target::K8s) if args.layout == Layout::Pods => {
            if k8s_options.queue.is_some() {
                errln!("error: {}", k8s::pods::NO_QUEUE);
                return USAGE;
            }
            let manifests = k8s::pods::lower(group, &k8s_options);
            let all = manifests.manifests(&group.name);
            add_diagnostics(&mut compilation, manifests.diagnostics);
            objects = all;
            if args.rbac {
                objects.insert(0, k8s::rbac::role(k8s_options.namespace.as_deref()));
            }
        }
        (Some(group), Target::K8s) => {
            let manifests = k8s::lower(group, &k8s_options);
            add_diagnostics(&mut compilation, manifests.diagnostics);
            objects = manifests.objects;
            if args.rbac {
                objects.insert(0, k8s::rbac::role(k8s_options.namespace.as_deref()));
            }
        }
        // What `pool apply --target slurm` submits for each worker.
        (Some(group), Target::Slurm) if group.pool.is_some() => {
            let built = slurm::worker(group, &args.slurm.options(args.grace));
            add_diagnostics(&mut compilation, built.diagnostics);
            script = built.script;
        }
        (Some(group), Target::Slurm) => {
            let options = args.slurm.options(args.grace);
            match group.execution {
                Execution::Parallel => {
                    let built = slurm::build(group, &options);
                    add_diagnostics(&mut compilation, built.diagnostics);
                    script = built.script;
                }
                Execution::Serial => {
                    let built = slurm::pipeline(group, &options);
                    add_diagnostics(&mut compilation, built.diagnostics);
                    pipeline = built.pipeline;
                }
            }
        }
        (Some(group), Target::Aws | Target::Gcp) => {
            if let Some(catalog) = &catalog {
                // AWS runs deliver the files: the boot scripts show how.
                let (files, mut diagnostics) = match args.target {
                    Target::Aws => match super::files::packed(group, false) {
                        Ok((files, diagnostics)) => (Some(files), diagnostics),
                        Err(message) => {
                            errln!("error: {message}");
                            return USAGE;
                        }
                    },
                    _ => (None, Vec::new()),
                };
                files_failed = diagnostics.iter().any(Diagnostic::is_error);
                if !files_failed {
                    let built = cloud::build_with_files(group, catalog, files.as_ref());
                    diagnostics.extend(built.diagnostics);
                    spec = built.document;
                }
                add_diagnostics(&mut compilation, diagnostics);
            }
        }
        _ => {}
    }
    report::human(
        std::slice::from_ref(&compilation),
        args.color.enabled(),
        false,
    );
    let Some(group) = &compilation.group else {
        return INVALID;
    };
    if compilation.has_errors() {
        return INVALID;
    }
    match args.target {
        Target::Ir => {
            let mut json = serde_json::to_string_pretty(group).unwrap_or_default();
            json.push('\n');
            write_stdout(&json)
        }
        Target::K8s => write_objects(args, &objects),
        Target::Slurm => {
            if let Some(pipeline) = pipeline {
                return match &args.out {
                    Some(dir) => write_files(dir, &pipeline.files()),
                    None => write_stdout(&pipeline.submit_script()),
                };
            }
            let Some(script) = script else {
                return INVALID;
            };
            match &args.out {
                Some(path) => match std::fs::write(path, &script) {
                    Ok(()) => OK,
                    Err(e) => {
                        errln!("error: cannot write {}: {e}", path.display());
                        USAGE
                    }
                },
                None => write_stdout(&script),
            }
        }
        Target::Files => {
            let Some(review) = files else {
                return INVALID;
            };
            write_stdout(&match args.output {
                Output::Yaml => k8s::yaml::stream(std::slice::from_ref(&review)),
                Output::Json => {
                    let mut t = serde_json::to_string_pretty(&review).unwrap_or_default();
                    t.push('\n');
                    t
                }
            })
        }
        Target::Aws | Target::Gcp => {
            let Some(spec) = spec else {
                return INVALID;
            };
            let cloud = args.target.cloud().map_or("cloud", Cloud::name);
            write_spec(args, &spec, &format!("{}.{cloud}", group.name))
        }
    }
}

/// Target diagnostics join the front end's, in source order, so they
/// render (and count) as one list.
fn add_diagnostics(compilation: &mut Compilation, more: Vec<Diagnostic>) {
    compilation.diagnostics.extend(more);
    compilation
        .diagnostics
        .sort_by_key(|d| (d.primary.span.start, d.primary.span.end, d.rule));
}

fn write_stdout(text: &str) -> u8 {
    use std::io::Write as _;
    // A closed reader ends the process (out::stdout); any other failure is
    // reported there.
    let _ = out::stdout().write_all(text.as_bytes());
    OK
}

fn write_files(dir: &Path, files: &[(String, String)]) -> u8 {
    if let Err(e) = std::fs::create_dir_all(dir) {
        errln!("error: cannot create {}: {e}", dir.display());
        return USAGE;
    }
    for (name, text) in files {
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, text) {
            errln!("error: cannot write {}: {e}", path.display());
            return USAGE;
        }
    }
    OK
}

/// `--controller`: the controller's objects (k8s) or its instance spec
/// (aws), as the group's are written.
fn controller(args: &Args) -> u8 {
    let built = match args.target {
        Target::K8s => {
            return match args.controller_args.objects(args.k8s.namespace.clone()) {
                Ok(objects) => write_objects(args, &objects),
                Err(message) => {
                    errln!("error: {message}");
                    USAGE
                }
            };
        }
        Target::Aws => catalog::load(Cloud::Aws, args.catalog.as_deref())
            .and_then(|catalog| args.controller_args.aws_spec(&catalog)),
        _ => {
            errln!("error: --controller is for the k8s and aws targets");
            return USAGE;
        }
    };
    let spec = match built {
        Ok(spec) => spec,
        Err(message) => {
            errln!("error: {message}");
            return USAGE;
        }
    };
    write_spec(args, &spec, "skyc-controller.aws")
}

/// An instance spec, as `-o` and `--out` ask (`--out DIR`:
/// `DIR/{name}.{yaml|json}`).
fn write_spec(args: &Args, spec: &serde_json::Value, name: &str) -> u8 {
    let (text, extension) = match args.output {
        Output::Yaml => (k8s::yaml::stream(std::slice::from_ref(spec)), "yaml"),
        Output::Json => {
            let mut t = serde_json::to_string_pretty(spec).unwrap_or_default();
            t.push('\n');
            (t, "json")
        }
    };
    match &args.out {
        Some(dir) => write_files(dir, &[(format!("{name}.{extension}"), text)]),
        None => write_stdout(&text),
    }
}

/// Kubernetes objects, as `-o` and `--out` ask.
fn write_objects(args: &Args, objects: &[serde_json::Value]) -> u8 {
    let format = match args.output {
        Output::Yaml => k8s::emit::Format::Yaml,
        Output::Json => k8s::emit::Format::Json,
    };
    match &args.out {
        Some(dir) => write_files(dir, &k8s::emit::files(objects, format)),
        None => write_stdout(&k8s::emit::render(objects, format)),
    }
}
