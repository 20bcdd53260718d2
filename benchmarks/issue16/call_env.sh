# Sourced by the issue-16 call scripts from session 37 on (earlier ones spell it out, as they ran): the GPU
# environment (scripts/gpu_env.sh, our cubins from .gpu/kernels), a log in $OUT, and r CMD...: run CMD, its output
# and exit status into the log.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
