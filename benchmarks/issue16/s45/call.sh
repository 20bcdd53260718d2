#!/usr/bin/env bash
# Session 45's call, in order of what is owed, each step cut to the time left of ~560 s. First the GPU tests of the
# final TC_WHOLE form (52f5ede on, never run on a GPU). On an H200 then issue 16's targets at this commit with the
# tensor-core graphs unsplit by default, and session 44's five engines beside them in the same process
# (`bench_gpu.py p1 p2 tcwhole`: tcbase is TC_WHOLE's twin, tcwhole16 the pages-of-16 lead); on an H100 `tcpair`.
# Then `tests/gpu` whole and, on an H200, read_rate.py. Prepare .gpu as s40/call.sh says.
#   bash benchmarks/issue16/s45/call.sh
source benchmarks/issue16/call_env.sh
CALL_SECS=${S45_SECS:-560}  # a shorter call where less device time is left
run_for 80 python3 -m pytest -q tests/gpu/test_graphs.py -k "unsplit or balanced or lean_plan" -p no:cacheprovider -rfs
if [ $h200 = 1 ]; then
  run_for 330 python3 benchmarks/bench_gpu.py p1 p2 tcwhole
else
  run_for 200 python3 benchmarks/bench_gpu.py tcpair
fi
cp benchmarks/results.json $OUT/results.json
run_for 200 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs --deselect \
  tests/gpu/test_graphs.py::test_unsplit_tensor_core_graphs_finish_and_give_what_the_split_ones_give
[ $h200 = 1 ] && run_for 40 python3 benchmarks/issue16/s42/read_rate.py
echo "call done ($SECONDS s)" >>$LOG
