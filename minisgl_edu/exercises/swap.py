"""Plugging your functions into the library: load your file, replace the library's attribute, restore it.

`swapped(exercises, path)` is a context manager for this process; `apply_from_env()` does the same
for good in a process started with `$MINISGL_EXERCISES` set (a JSON map {exercise id: file}), which
`minisgl_edu/__init__.py` calls at import: that is how TP ranks and server workers get your code.
`patched(target, (old, new), ...)` builds a deliberately wrong twin of a library function from a
few edits of its source (how tests/exercise_mutants/ write the mistakes each grader must catch).
"""
from __future__ import annotations

import __future__
import ast
import importlib
import importlib.util
import inspect
import itertools
import json
import linecache
import os
import sys
import textwrap
from contextlib import contextmanager

from . import NotAttempted
from .registry import Exercise, by_id, build_exercises

ENV = "MINISGL_EXERCISES"
_PATCHES = itertools.count()  # numbers the source of each patched twin (see patched)


def load_file(path: str):
    """Import the reader's chNN.py as a fresh module (a new one each call: edits are picked up)."""
    name = f"_minisgl_exercise_{abs(hash(os.path.abspath(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(mod)
    return mod


def is_stub(fn) -> bool:
    """True when the function body is still only (docstring +) `raise NotAttempted...`."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and "NotAttempted" in ast.unparse(body[0])


def _resolve(target: str):
    """'pkg.mod:Cls.attr' -> (owner object, attribute name)."""
    mod_name, path = target.split(":")
    owner = importlib.import_module(mod_name)
    *parents, attr = path.split(".")
    for p in parents:
        owner = getattr(owner, p)
    return owner, attr


def _import(ref: str):
    mod_name, attr = ref.split(":")
    return getattr(importlib.import_module(mod_name), attr)


def patched(target: str, *edits: tuple[str, str], calls: tuple[str, ...] = ()):
    """The library's `target` ("module:Attr.path") rebuilt from its source with each (old, new) text edit.

    Each `old` must occur exactly once (as written in the library file), so a library change cannot
    silently turn the mistake off. `calls`: module functions the target calls, rebuilt with it (an
    edit may fall in them: the rebuilt target calls the rebuilt ones). Globals stay the module's live
    ones (tp._TP is set after import), and the module itself is left as it was."""
    owner, attr = _resolve(target)
    fn = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
    g = fn.__globals__
    parts = [(c, g[c]) for c in calls] + [(target.split(":")[1], fn)]
    for name, f in parts:
        if f.__qualname__ != name:  # e.g. an exercise swapped in: edits are of the library's own code
            raise ValueError(f"{target}: {name} is {f.__qualname__} now, not the library's")
    sources = [inspect.getsource(f) for _, f in parts]
    for old, new in edits:
        hits = sum(s.count(old) for s in sources)
        if hits != 1:
            raise ValueError(f"{target}: {old!r} occurs {hits} times in the library's source, not once")
        sources = [s.replace(old, new) for s in sources]
    # one factory function: the rebuilt `calls` are its locals, so the rebuilt target (and their own
    # recursion) finds them, while every other name is the module's global
    body = "".join(textwrap.indent(textwrap.dedent(s), "    ") for s in sources)
    src = f"def _make():\n{body}    return {fn.__name__}\n"
    filename = f"<{target}, patch {next(_PATCHES)}>"  # one name per twin: two twins of one target differ
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)  # tracebacks show the lines
    scope: dict = {}
    exec(compile(src, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True), g, scope)
    return scope["_make"]()


def replacements(ex: Exercise, module) -> list[tuple[object, str, object]]:
    """(owner, attribute, new value) for every target of `ex`, from the reader's module."""
    out = []
    for target, fname in zip(ex.targets, ex.funcs):
        owner, attr = _resolve(target)
        fn = getattr(module, fname, None)
        if fn is None:
            raise NotAttempted(f"{fname} is not defined in your file")
        original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        new = _import(ex.adapter)(fn, original) if ex.adapter else fn
        out.append((owner, attr, new))
    for target, value in ex.fixed:
        out.append((*_resolve(target), _import(value)))
    return out


@contextmanager
def swapped(exercises: list[Exercise], path_of):
    """Install each exercise's function(s) from `path_of(ex)` (a file path) into the library; undo on exit."""
    saved = []
    try:
        for ex in exercises:
            module = load_file(path_of(ex))
            for owner, attr, new in replacements(ex, module):
                saved.append((owner, attr, owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)))
                setattr(owner, attr, new)
        yield
    finally:
        for owner, attr, old in reversed(saved):
            setattr(owner, attr, old)


def env_value(ids_to_files: dict[str, str]) -> str:
    return json.dumps({k: os.path.abspath(v) for k, v in ids_to_files.items()})


def folder_map(folder: str, skip_stubs: bool = True) -> dict[str, str]:
    """{exercise id: file} for every build exercise whose chNN.py is in `folder` (stubs left out)."""
    out = {}
    for ex in build_exercises():
        path = os.path.join(folder, f"ch{ex.chapter:02d}.py")
        if not os.path.exists(path):
            continue
        if skip_stubs:
            mod = load_file(path)
            if any(getattr(mod, f, None) is None or is_stub(getattr(mod, f)) for f in ex.funcs):
                continue
        out[ex.id] = path
    return out


def use_folder(folder: str) -> list[str]:
    """For this process and every process it starts: swap in each attempted exercise of `folder`."""
    os.environ[ENV] = env_value(folder_map(os.path.expanduser(folder)))
    return apply_from_env()


def apply_from_env() -> list[str]:
    """Apply the swaps named in $MINISGL_EXERCISES for the rest of this process; return their ids."""
    raw = os.environ.get(ENV)
    if not raw:
        return []
    mapping = json.loads(raw)
    for ex_id, path in mapping.items():
        ex = by_id(ex_id)
        for owner, attr, new in replacements(ex, load_file(path)):
            setattr(owner, attr, new)
    return list(mapping)


# ---- adapters: how a function you write becomes the attribute it replaces -----------------------------
def no_batch_decoder(tok):
    """ch09: the detokenizer's batched fast path off, so every token goes through your detokenize_next."""
    return None


def overlap_only(fn, original):
    """Scheduler.step: your overlap_step for an overlap scheduler, the library's normal loop otherwise."""
    def step(self):
        return fn(self) if self.overlap else original(self)
    step.__doc__ = original.__doc__
    return step
