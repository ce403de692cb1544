//! The Slurm options `build` and `run` share.

use skyc_targets::slurm::{self, SbatchOption};

#[derive(clap::Args, Clone)]
#[command(next_help_heading = "Slurm")]
pub(crate) struct SlurmArgs {
    /// The partition of every component.
    #[arg(long, value_name = "NAME", value_parser = sbatch_value)]
    partition: Option<String>,
    /// The account of every component.
    #[arg(long, value_name = "NAME", value_parser = sbatch_value)]
    account: Option<String>,
    /// The job's time limit, in sbatch's `--time` forms.
    #[arg(long, value_name = "TIME", value_parser = sbatch_value)]
    time: Option<String>,
    /// An extra option for every component, as `KEY[=VALUE]`.
    #[arg(long = "sbatch-option", value_name = "KEY[=VALUE]", value_parser = sbatch_option)]
    sbatch_options: Vec<SbatchOption>,
}

impl SlurmArgs {
    pub(crate) fn options(&self, grace_secs: u64) -> slurm::Options {
        slurm::Options {
            partition: self.partition.clone(),
            account: self.account.clone(),
            time: self.time.clone(),
            sbatch_options: self.sbatch_options.clone(),
            grace_secs,
        }
    }
}

fn sbatch_value(s: &str) -> Result<String, String> {
    if slurm::is_safe_value(s) {
        Ok(s.to_owned())
    } else {
        Err("only letters, digits and `_.:/=,@%+-[]*` are safe on an #SBATCH line".to_owned())
    }
}

fn sbatch_option(s: &str) -> Result<SbatchOption, String> {
    SbatchOption::parse(s).map_err(|e| e.to_string())
}
