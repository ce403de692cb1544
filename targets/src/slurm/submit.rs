//! The submit script of a pipeline: each step's job submitted in order,
//! after the one before, with the ids printed. Standard output gets one
//! self-contained script (each step's batch script in a quoted
//! here-document); `--out DIR` gets the step scripts as files and a
//! `submit.sh` that reads them.

use super::pipeline::{AFTER_OK, PIPELINE_JOB, Pipeline};
use crate::shell::quote;
use std::fmt::Write;

/// Where the submit script reads each step's batch script from.
enum Feed {
    /// A here-document in the script itself.
    Inline,
    /// `step-<i>-<name>.sbatch` beside the script.
    Files,
}

impl Pipeline {
    /// One self-contained script: `bash FILE` submits every step.
    pub fn submit_script(&self) -> String {
        self.driver(&Feed::Inline)
    }

    /// Each step's batch script as [`Pipeline::step_file`], and
    /// `submit.sh`, which submits them from the directory they are in.
    pub fn files(&self) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (self.step_file(i), s.script.clone()))
            .collect();
        files.push(("submit.sh".to_owned(), self.driver(&Feed::Files)));
        files
    }

    /// The file name of step `i`'s batch script: `step-<i>-<name>.sbatch`.
    pub fn step_file(&self, i: usize) -> String {
        format!("step-{i}-{}.sbatch", self.steps[i].name)
    }

    fn driver(&self, feed: &Feed) -> String {
        let n = self.steps.len();
        let name = &self.name;
        let mut s = format!(
            "#!/bin/bash\n\
             # Built by skyc: the SkyPilot pipeline {name} as {n} Slurm batch job{plural}, one per\n\
             # step, submitted in order. A step's job starts once the job before it ended\n\
             # COMPLETED (--dependency=afterok); when a step fails, Slurm cancels the jobs\n\
             # of the steps after it (--kill-on-invalid-dep=yes in their scripts).\n\
             # Run `bash FILE` in the directory the jobs should start in; it prints\n\
             # `STEP JOBID` for each step. Output: DIR/STEP when SKYC_OUT=DIR is exported,\n\
             # else skyc-{name}-JOBID0/STEP there (JOBID0: the job of step 0).\n\
             set -eu\n",
            plural = if n == 1 { "" } else { "s" },
        );
        if let Feed::Files = feed {
            s.push_str("skyc_dir=$(dirname -- \"${BASH_SOURCE[0]}\")\n");
        }
        let _ = write!(
            s,
            "skyc_first=\"\" skyc_prev=\"\" skyc_ids=()\n\
             \n\
             # Submits the batch script on standard input as step $1, after the step\n\
             # before; if sbatch refuses it, cancels the steps already submitted.\n\
             skyc_submit() {{\n\
             \x20   local out=\"\" id=\"\" after=()\n\
             \x20   if [ -n \"$skyc_prev\" ]; then after=({AFTER_OK}\"$skyc_prev\"); fi\n\
             \x20   if out=$(\n\
             \x20       if [ -n \"${{SKYC_OUT:-}}\" ]; then export SKYC_OUT=$SKYC_OUT/$1; fi\n\
             \x20       export {PIPELINE_JOB}=$skyc_first\n\
             \x20       exec sbatch --parsable \"${{after[@]}}\"\n\
             \x20   ); then\n\
             \x20       # `ID` or `ID;CLUSTER` on the last line.\n\
             \x20       id=${{out##*$'\\n'}} id=${{id%%;*}}\n\
             \x20   fi\n\
             \x20   if ! [[ $id =~ ^[0-9]+$ ]]; then\n\
             \x20       echo \"skyc: step $1 was not submitted${{out:+ (sbatch printed: $out)}}\" >&2\n\
             \x20       if ((${{#skyc_ids[@]}})); then\n\
             \x20           echo \"skyc: cancelling the jobs of the steps before it: ${{skyc_ids[*]}}\" >&2\n\
             \x20           scancel \"${{skyc_ids[@]}}\"\n\
             \x20       fi\n\
             \x20       exit 1\n\
             \x20   fi\n\
             \x20   skyc_ids+=(\"$id\") skyc_prev=$id skyc_first=${{skyc_first:-$id}}\n\
             \x20   echo \"$1 $id\"\n\
             }}\n"
        );
        if let Feed::Files = feed {
            s.push('\n');
        }
        for (i, step) in self.steps.iter().enumerate() {
            let name = quote(&step.name);
            match feed {
                Feed::Files => {
                    let _ = writeln!(
                        s,
                        "skyc_submit {name} <\"$skyc_dir\"/{}",
                        quote(&self.step_file(i))
                    );
                }
                Feed::Inline => {
                    let end = delimiter(&step.script);
                    // A here-document holds whole lines.
                    let newline = if step.script.ends_with('\n') {
                        ""
                    } else {
                        "\n"
                    };
                    let _ = write!(
                        s,
                        "\n# ---- step {i}: {} ----\nskyc_submit {name} <<'{end}'\n{}{newline}{end}\n",
                        step.name, step.script
                    );
                }
            }
        }
        s
    }
}

/// A here-document delimiter that no line of `script` equals. Every line
/// a user value reaches is generated text around a one-line quoted word,
/// so the first choice always fits; the loop makes that a guarantee.
fn delimiter(script: &str) -> String {
    let mut end = "SKYC_END_OF_STEP".to_owned();
    while script.lines().any(|l| l == end) {
        end.push('_');
    }
    end
}

#[cfg(test)]
mod tests {
    use super::delimiter;

    #[test]
    fn the_delimiter_is_no_line_of_the_script() {
        assert_eq!(delimiter("echo SKYC_END_OF_STEP\n"), "SKYC_END_OF_STEP");
        assert_eq!(
            delimiter("a\nSKYC_END_OF_STEP\nSKYC_END_OF_STEP_\nb\n"),
            "SKYC_END_OF_STEP__"
        );
    }
}
