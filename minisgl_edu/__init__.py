"""minisgl-edu: an annotated LLM serving engine in the shape of Mini-SGLang.

Chapters and modules: 1 `messages`/`server` · 2 `req` · 3 `prefill` · 4 `paging` · 5 `radix` ·
6 `scheduler` · 7 `attention`/`graphs` · 8 `tp` · 9 `serve`.
"""
import os as _os

from .req import SamplingParams

__all__ = ["LLM", "SamplingParams"]


def __getattr__(name):  # import the engine lazily: `import minisgl_edu.messages` stays light
    if name == "LLM":
        from .llm import LLM
        return LLM
    raise AttributeError(name)


if _os.environ.get("MINISGL_EXERCISES"):  # the build path: this process runs the reader's functions (exercises/swap.py)
    from .exercises.swap import apply_from_env
    apply_from_env()
