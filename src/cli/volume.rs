//! `skyc volume apply|ls|delete`: the volumes tasks mount (`volumes:
//! {PATH: NAME}`), as `sky volumes` makes, lists and deletes them.

use super::check::Color;
use super::exit::{INVALID, NOT_FOUND, OK, USAGE};
use super::out::{errln, out};
use super::state::StateArgs;
use super::table::Table;
use super::{input, report, target};
use skyc_compiler::ir::{At, Volume};
use skyc_compiler::{Compilation, compile_volume};
use skyc_runtime::store::{Backend, Store};
use skyc_runtime::volumes::{self, Applied};

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    Apply(ApplyArgs),
    Ls(LsArgs),
    Delete(DeleteArgs),
}

/// Make a volume, from a SkyPilot volume file or flags (the flags win),
/// or keep the one of that name. On this machine and on Slurm a volume is
/// a directory of the state directory, shared by every node that mounts
/// it; on Kubernetes a PersistentVolumeClaim of its name.
#[derive(clap::Args)]
pub(crate) struct ApplyArgs {
    /// The volume file (`name`, `type`, `size`, ...); `-` reads standard
    /// input.
    #[arg(value_name = "FILE", required_unless_present = "name")]
    file: Option<String>,
    /// Its name.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Its size (`10Gi`; a bare number is GiB).
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Where its tasks run.
    #[arg(long, value_parser = target::parser(|d| d.runs_group), default_value = "local")]
    target: Backend,
    /// The claim's namespace (k8s); default: the file's `config.namespace`,
    /// else the context's.
    #[arg(long, value_name = "NAME")]
    namespace: Option<String>,
    /// The kubeconfig context (k8s); default: the file's `infra:
    /// k8s/CONTEXT`, else the current one.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// When to colour diagnostics.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    color: Color,
    #[command(flatten)]
    state: StateArgs,
}

/// List the volumes.
#[derive(clap::Args)]
pub(crate) struct LsArgs {
    /// As JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

/// Delete volumes and what they hold; refused while a live group mounts
/// one.
#[derive(clap::Args)]
pub(crate) struct DeleteArgs {
    #[arg(value_name = "NAME", required = true)]
    names: Vec<String>,
    #[command(flatten)]
    state: StateArgs,
}

pub(crate) fn run(command: &Command) -> u8 {
    let result = match command {
        Command::Apply(a) => apply(a),
        Command::Ls(a) => ls(a),
        Command::Delete(a) => delete(a),
    };
    result.unwrap_or_else(|(code, message)| {
        errln!("error: {message}");
        code
    })
}

type Outcome = Result<u8, (u8, String)>;

fn apply(args: &ApplyArgs) -> Outcome {
    let k8s = args.target == Backend::Kubernetes;
    if !volumes::kept_as_directories(args.target) && !k8s {
        return Err((
            USAGE,
            format!(
                "{} has no volumes in skyc: share data through a bucket (`file_mounts`)",
                args.target.descriptor().title
            ),
        ));
    }
    if !k8s && (args.namespace.is_some() || args.context.is_some()) {
        return Err((
            USAGE,
            "--namespace and --context are for the k8s target".into(),
        ));
    }
    let usage = |m: String| (USAGE, m);
    // The file's volume, or one from the flags alone.
    let (source, mut volume) = match &args.file {
        Some(file) => {
            let (name, bytes) = input::read(file).map_err(usage)?;
            let compiled = compile_volume(&name, &bytes);
            let compilation = Compilation {
                source: compiled.source,
                diagnostics: compiled.diagnostics,
                group: None,
            };
            let Some(volume) = compiled.volume else {
                report::human(
                    std::slice::from_ref(&compilation),
                    args.color.enabled(),
                    false,
                );
                return Ok(INVALID);
            };
            (Some(compilation), volume)
        }
        None => (
            None,
            Volume {
                name: String::new(),
                r#type: "k8s-pvc".into(),
                infra: None,
                size_gb: None,
                use_existing: false,
                config: None,
                at: At::default(),
            },
        ),
    };
    if let Some(name) = &args.name {
        volume.name.clone_from(name);
    }
    if let Some(size) = &args.size {
        let gb =
            skyc_compiler::parse_volume_size(size).map_err(|e| usage(format!("--size: {e}")))?;
        volume.size_gb = Some(gb);
    }
    if volume.name.is_empty() {
        return Err(usage("a volume needs a name (`--name`)".into()));
    }
    if volume.lacks_size() {
        return Err(usage(
            "a new volume needs a size (`--size 10Gi`), as SkyPilot asks".into(),
        ));
    }
    let (dir, mut store) = args.state.open().map_err(usage)?;
    if k8s {
        let applied = volumes::apply_k8s(
            &mut store,
            &volume,
            args.namespace.as_deref(),
            args.context.as_deref(),
        );
        return match applied {
            Ok((applied, path)) => {
                let what = match applied {
                    Applied::Made(_) => "made",
                    Applied::Kept(_) => "exists",
                };
                errln!(
                    "skyc: volume `{}` {what} on k8s: the PersistentVolumeClaim {path}",
                    volume.name
                );
                Ok(OK)
            }
            Err(diagnostic) => refused(source, *diagnostic, args.color),
        };
    }
    match volumes::apply(&mut store, &dir, args.target, &volume) {
        Ok(Applied::Made(path)) => {
            let size = volume
                .size_gb
                .map(|g| format!("{g} GiB, not enforced: "))
                .unwrap_or_default();
            errln!(
                "skyc: volume `{}` made on {} ({size}a directory): {}",
                volume.name,
                args.target.as_str(),
                path.display()
            );
            Ok(OK)
        }
        Ok(Applied::Kept(path)) => {
            errln!(
                "skyc: volume `{}` exists on {}: {}",
                volume.name,
                args.target.as_str(),
                path.display()
            );
            Ok(OK)
        }
        Err(diagnostic) => refused(source, *diagnostic, args.color),
    }
}

/// A volume that cannot be applied: the diagnostic at the file's line, or
/// its message when it came from the flags alone.
fn refused(
    source: Option<Compilation>,
    diagnostic: skyc_compiler::Diagnostic,
    color: Color,
) -> Outcome {
    match source {
        Some(mut compilation) => {
            compilation.diagnostics.push(diagnostic);
            report::human(std::slice::from_ref(&compilation), color.enabled(), false);
            Ok(INVALID)
        }
        None => Err((INVALID, diagnostic.message)),
    }
}

fn ls(args: &LsArgs) -> Outcome {
    let dir = args.state.dir();
    let rows = match Store::open_read_only(&dir).map_err(|e| (USAGE, e))? {
        Some(store) => store.volumes().map_err(|e| (USAGE, e.to_string()))?,
        None => Vec::new(),
    };
    if args.json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|v| {
                serde_json::json!({
                    "name": v.name,
                    "target": v.backend.as_str(),
                    "size_gb": v.size_gb,
                    "path": v.path,
                    "created_at_ms": v.created_at_ms,
                })
            })
            .collect();
        out!(
            "{}\n",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
        return Ok(OK);
    }
    if rows.is_empty() {
        errln!("skyc: no volumes (`skyc volume apply` makes one)");
        return Ok(OK);
    }
    let mut t = Table::new(&["NAME", "TARGET", "SIZE", "PATH"]);
    for v in &rows {
        t.row(vec![
            v.name.clone(),
            v.backend.as_str().to_owned(),
            v.size_gb.map_or("-".to_owned(), |g| format!("{g}Gi")),
            v.path.clone(),
        ]);
    }
    out!("{}", t.render());
    Ok(OK)
}

fn delete(args: &DeleteArgs) -> Outcome {
    let dir = args.state.dir();
    // No state directory, no volume: none is made to say so.
    if Store::open_read_only(&dir)
        .map_err(|e| (USAGE, e))?
        .is_none()
    {
        return Err((NOT_FOUND, format!("no volume named `{}`", args.names[0])));
    }
    let (dir, mut store) = args.state.open().map_err(|e| (USAGE, e))?;
    let mut code = OK;
    for name in &args.names {
        match volumes::delete(&mut store, &dir, name) {
            Ok(()) => errln!("skyc: volume `{name}` deleted"),
            Err(message) => {
                errln!("error: {message}");
                code = if message.starts_with("no volume") {
                    NOT_FOUND
                } else {
                    USAGE
                };
            }
        }
    }
    Ok(code)
}
