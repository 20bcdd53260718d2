#!/usr/bin/env bash
# The robustness suite's soak variants (tests marked `slow` in tests/robustness/): 2000 requests through
# a 256-token KV pool, 6 rounds of 64 streaming clients with disconnects (RSS per round), and 400 fresh
# schema-fuzz examples per route and mode. Prints the figures that benchmarks/ROBUSTNESS.md records.
#   bash scripts/soak.sh            # the soak variants only (~20 min on two busy cores)
#   bash scripts/soak.sh --all      # the CI part too
set -euo pipefail
cd "$(dirname "$0")/.."
select=(-k soak)
[[ "${1:-}" == "--all" ]] && select=()
echo "# soak: $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git rev-parse --short HEAD) on $(nproc) cores"
MINISGL_SOAK=1 python3 -m pytest -q -s -p no:cacheprovider tests/robustness "${select[@]}" --durations=0
