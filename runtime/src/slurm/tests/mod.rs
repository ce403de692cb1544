//! The Slurm backend against a fake Slurm (sbatch, squeue, sacct, scancel
//! and srun as small bash scripts on the plans' `PATH`): a pipeline's
//! submission and following (`pipeline`), and a pool's workers and jobs
//! (`pools`). What a real cluster does is `tests/slurm_*.rs`'s.

mod pipeline;
mod pools;
