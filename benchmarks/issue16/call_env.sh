# Sourced by the issue-16 call scripts from session 37 on (earlier ones spell it out, as they ran): the GPU
# environment (scripts/gpu_env.sh, our cubins from .gpu/kernels), a log in $OUT, and r CMD...: run CMD, its output
# and exit status into the log. From session 45 on also: h200 (1 on an H200), and run_for SECS CMD...: r with a timeout
# of SECS or of what is left of the call's CALL_SECS (set by the script), skipped under 20 s.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
h200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && h200=1
run_for() {
  local t=$(( ${CALL_SECS:?the script sets CALL_SECS} - SECONDS )); [ "$1" -lt "$t" ] && t=$1; shift
  if [ "$t" -le 20 ]; then echo "=== skipped (no time): $*" >>$LOG; return 1; fi
  r timeout "$t" "$@"
}
