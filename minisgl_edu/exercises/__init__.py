"""The build path: in every chapter you write the mechanism, and the real engine grades it.

    python -m minisgl_edu.exercises list                 # every exercise, one line each
    python -m minisgl_edu.exercises check 03             # grade your ~/minisgl-exercises/ch03.py
    python -m minisgl_edu.exercises check 03 --file F    # grade another file
    python -m minisgl_edu.exercises check 03 --solution  # grade the reference solution

Your files live in `~/minisgl-exercises/` (or `$MINISGL_EXERCISES_DIR`): the first `check` of a
chapter copies its stub there (`chNN.py`, one function per exercise, with the library's own
signature). The reference solution (`--solution`) is the library's own function. A stub raises `NotAttempted`, and the grader reports it as
"not attempted" (not passed), never as correct.

Grading swaps your function into the library's own class or module attribute for the duration of
the grade (`swap.swapped`), runs the chapter's property tests (hypothesis; a failure shows the
shrunk input) and, where the mechanism decides tokens, runs the real engine with your code and
compares its tokens with the library's (which `tests/test_oracle.py` proves token-exact against
transformers). Nothing in the library knows about exercises except one hook in
`minisgl_edu/__init__.py` (with `$MINISGL_EXERCISES` set, every process — TP ranks, server
workers — applies the same swaps at import: `swap.apply_from_env`) and the `--exercises FOLDER`
flag of `python -m minisgl_edu.serve`, which sets it.
"""
from __future__ import annotations


class NotAttempted(NotImplementedError):
    """Raised by an exercise stub: the grader prints "not attempted" (and counts it as not passed)."""


class Wrong(AssertionError):
    """A grader's verdict: one sentence saying what went wrong, on which input."""
