# skyc pool job launcher: one attempt of a pool job as a step of its
# worker's allocation, started detached by the supervisor as
# `bash launch.sh DIR SRUN_ARGUMENTS...` with DIR/lock, locked, as its
# standard input. The lock stays held as long as srun runs (srun inherits
# it), so a supervisor, a later one after a crash too, knows whether the
# step still runs without asking Slurm; srun's own status goes to
# DIR/srun.exit (the nodes' go to their exit files, written by the step
# wrapper).
set -u
d=$1
shift
exec 9<&0 </dev/null
srun "$@"
echo "$?" >"$d/srun.exit"
