//! `skyc controller up|status|down --target aws` and what runs on the
//! controller's instance (`serve --target aws`): docs/controller.md,
//! "On AWS".

use super::controller::ControllerArgs;
use super::exit::{NOT_FOUND, OK, USAGE};
use super::out::{errln, outln};
use super::state::StateArgs;
use skyc_runtime::controller::aws::{self, Down, Serving, Up};
use skyc_runtime::controller::remote::Remote;
use skyc_targets::cloud::Cloud;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// How `up --target aws` reaches the instance and what it gives it.
#[derive(clap::Args)]
#[command(next_help_heading = "AWS")]
pub(crate) struct AwsUpArgs {
    /// The image's login user, whom skyc reaches the controller as over
    /// SSH.
    #[arg(long, value_name = "USER", default_value = "ubuntu")]
    ssh_user: String,
    /// Reach the controller at its private address (a machine inside its
    /// VPC) rather than its public one.
    #[arg(long)]
    ssh_private: bool,
    /// The skyc the controller runs: a static executable for its OS
    /// (Linux on x86_64 or arm64, as its instance type; docs/controller.md
    /// says how one is built) [default: this skyc].
    #[arg(long, value_name = "FILE")]
    controller_binary: Option<PathBuf>,
}

/// Which controller on AWS.
#[derive(clap::Args)]
#[command(next_help_heading = "AWS")]
pub(crate) struct RegionArgs {
    /// The controller's region (aws) [default: the configured region].
    #[arg(long = "controller-region", value_name = "REGION")]
    region: Option<String>,
}

impl RegionArgs {
    fn region(&self) -> Result<String, String> {
        let region = self.region.clone().or_else(configured).ok_or_else(|| {
            "no region: give --controller-region (or configure one: AWS_REGION, a profile's region)"
                .to_owned()
        })?;
        // As `aws://REGION` names one.
        match Remote::parse(&format!("{}{region}", aws::SCHEME)) {
            Some(Ok(_)) => Ok(region),
            _ => Err(format!("`{region}` is not an AWS region's name")),
        }
    }
}

/// The region AWS's configuration names, if any.
fn configured() -> Option<String> {
    skyc_runtime::aws::Access::from_env().ok()?.0.region
}

pub(crate) fn up(args: &AwsUpArgs, controller: &ControllerArgs) -> u8 {
    let mut wanted = controller.aws();
    if wanted.region.is_none() {
        wanted.region = configured();
    }
    match make(
        &wanted,
        &args.ssh_user,
        args.ssh_private,
        args.controller_binary.as_deref(),
    ) {
        Ok(region) => {
            let state = format!("{}{region}", aws::SCHEME);
            errln!("  submit to it:  skyc run FILE --target aws --state-dir {state}");
            errln!("  its groups:    skyc status --state-dir {state}");
            OK
        }
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

/// Makes (or starts) the controller `wanted` asks for, reached as `user`
/// (at its private address when `private`), running `binary` (else this
/// skyc); says what it made. Answers its region.
fn make(
    wanted: &skyc_targets::cloud::controller::Controller,
    user: &str,
    private: bool,
    binary: Option<&std::path::Path>,
) -> Result<String, String> {
    let catalog = super::catalog::load(Cloud::Aws, None)?;
    let spec = skyc_targets::cloud::controller::spec(wanted, &catalog)?;
    let region = spec["region"].as_str().unwrap_or_default().to_owned();
    let binary = match binary {
        Some(b) => b.to_owned(),
        None => std::env::current_exe().map_err(|e| format!("this skyc: {e}"))?,
    };
    if dynamic(&binary) {
        errln!(
            "skyc: note: {} is dynamically linked: the controller (Ubuntu 22.04) runs it \
             only if its C library is as new as the one it was built with; \
             scripts/static-build makes one that runs anywhere (--controller-binary)",
            binary.display()
        );
    }
    let idle = std::time::Duration::from_secs(wanted.idle_seconds);
    let idle_text = if wanted.idle_seconds == u64::MAX {
        "never stopped when idle".to_owned()
    } else {
        format!("stopped after {} s idle", wanted.idle_seconds)
    };
    errln!(
        "skyc: the controller in {region}: {} (${}/h), {idle_text}",
        spec["instance_type"].as_str().unwrap_or("?"),
        spec["hourly_price"],
    );
    let upped = aws::up(&Up {
        region: region.clone(),
        spec,
        user: user.to_owned(),
        private,
        binary,
        idle,
    })?;
    for what in &upped.made {
        errln!("skyc: made {what}");
    }
    errln!(
        "skyc: the controller in {region} runs as instance {} at {}",
        upped.instance,
        upped.address
    );
    Ok(region)
}

/// Before a run submits to `aws://REGION`: when this machine has brought
/// no controller up there and SkyPilot's configuration has a
/// `jobs.controller`, the controller it configures is made in that
/// region (SkyPilot starts its controller on the first managed job),
/// reached as the run reaches its nodes. Otherwise nothing: the
/// submission says how to make one.
pub(crate) fn ensure_for_run(region: &str, user: &str, private: bool) -> Result<(), String> {
    let remote = aws::Aws {
        region: region.to_owned(),
    };
    if remote.dir().join("controller.json").exists() {
        return Ok(());
    }
    let Some(config) = super::sky_config::jobs_controller()? else {
        return Ok(());
    };
    let (mut wanted, notes) = config.on_aws();
    for note in &notes {
        errln!("skyc: note: {}: jobs.controller: {note}", config.file);
    }
    if let Some(other) = wanted.region.as_deref().filter(|r| *r != region) {
        errln!(
            "skyc: note: {}: jobs.controller's region is {other}; this run's controller is \
             aws://{region}",
            config.file
        );
    }
    wanted.region = Some(region.to_owned());
    errln!(
        "skyc: no controller of this machine's in {region}: making the one {} configures \
         (jobs.controller)",
        config.file
    );
    make(&wanted, user, private, None).map(|_| ())
}

/// Whether `path` is an ELF executable that names a dynamic loader
/// (`PT_INTERP`): one that runs only where its C library is.
fn dynamic(path: &std::path::Path) -> bool {
    use std::io::Read as _;
    let mut head = vec![0u8; 64 << 10];
    let Ok(n) = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)) else {
        return false;
    };
    let head = &head[..n];
    let u16_at = |o: usize| {
        head.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u64_at = |o: usize| {
        head.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()) as usize)
    };
    // ELF, 64-bit, little-endian.
    if head.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return false;
    }
    let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return false;
    };
    (0..count).any(|i| {
        let at = phoff + i * size;
        head.get(at..at + 4) == Some(&3u32.to_le_bytes()[..])
    })
}

pub(crate) fn status(args: &RegionArgs, json: bool) -> u8 {
    let found = args.region().and_then(|region| aws::status(&region));
    match found {
        Ok(Some(status)) if json => {
            outln!(
                "{}",
                serde_json::to_string_pretty(&status).unwrap_or_default()
            );
            OK
        }
        Ok(Some(status)) => {
            outln!(
                "controller in {}: instance {} ({}), {}",
                status.region,
                status.instance,
                status.instance_type,
                status.state
            );
            if let Some(address) = &status.address {
                outln!("address: {address}");
            }
            OK
        }
        Ok(None) => {
            errln!(
                "skyc: no controller in that region: `skyc controller up --target aws` makes one"
            );
            NOT_FOUND
        }
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

pub(crate) fn down(args: &RegionArgs, force: bool) -> u8 {
    let done = args
        .region()
        .and_then(|region| aws::down(&region, force).map(|d| (region, d)));
    match done {
        Ok((region, Down::Removed(removed))) => {
            if removed.is_empty() {
                errln!("skyc: no controller in {region}");
                return NOT_FOUND;
            }
            for what in removed {
                errln!("skyc: deleted {what}");
            }
            OK
        }
        Ok((region, Down::Live(live))) => {
            let state = Remote::Aws(aws::Aws {
                region: region.clone(),
            });
            super::controller::refuse_live(&region, &live, &state)
        }
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

/// What the controller's service runs on its instance.
pub(crate) fn serve(state: &StateArgs) -> u8 {
    let served = state.local().and_then(|dir| {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let serving = Serving::from_env(|k| std::env::var(k).ok())?;
        let stop = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(signal, Arc::clone(&stop));
        }
        aws::serve(&dir, &serving, &stop)
    });
    match served {
        Ok(()) => OK,
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamically_linked_executable_is_told_from_others() {
        // Test executables link the C library dynamically.
        assert!(dynamic(&std::env::current_exe().unwrap()));
        let dir = std::env::temp_dir().join(format!("skyc-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert!(!dynamic(&script));
        assert!(!dynamic(&dir.join("missing")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
