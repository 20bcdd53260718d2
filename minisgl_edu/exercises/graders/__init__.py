"""One grader module per chapter: `grade_<name>(exercise, path, module)` returns when the reader's code is
right and raises `Wrong` (one sentence: what, on which input) when it is not."""
from __future__ import annotations

import contextlib
import io
import os
import traceback

from .. import NotAttempted, Wrong


def prop(strategy, check, examples: int = 60, explicit: tuple = ()) -> None:
    """Run `check(x)` on the hand-picked `explicit` inputs, then on `examples` inputs drawn from `strategy`;
    on a failure hypothesis shrinks the input and the (smallest) failing input's Wrong is raised.
    Deterministic: the same inputs every run."""
    for x in explicit:  # small by construction: the classic traps of the chapter
        check(x)
    import hypothesis.internal.conjecture.engine as engine
    from hypothesis import HealthCheck, given, settings
    saved = engine.MAX_SHRINKS, engine.MAX_SHRINKING_SECONDS

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True, print_blob=False, report_multiple_bugs=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(x):
        check(x)

    engine.MAX_SHRINKS, engine.MAX_SHRINKING_SECONDS = 200, 8  # a grade stays well under a minute
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run()  # hypothesis' own reports are not for the reader: the Wrong below names the input
    except (Wrong, NotAttempted) as e:
        e.__notes__ = []  # hypothesis' "Falsifying example" note: the message already names the input
        raise
    finally:
        engine.MAX_SHRINKS, engine.MAX_SHRINKING_SECONDS = saved


def call(what: str, fn, *args, on: str = ""):
    """fn(*args), with anything it raises (but NotAttempted) turned into a Wrong naming the input."""
    try:
        return fn(*args)
    except (Wrong, NotAttempted):
        raise
    except Exception as e:
        detail = str(e)
        if not detail:  # a bare assert: say which one
            tb = traceback.extract_tb(e.__traceback__)[-1]
            detail = f"`{tb.line}` failed in {os.path.basename(tb.filename)}"
        raise Wrong(f"your {what} raised {type(e).__name__}: {detail}" + (f" on {on}" if on else "")) from None
