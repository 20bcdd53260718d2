"""Grading: run each exercise's grader on a file and turn every outcome into one line a reader can act on."""
from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import threading
import time
import traceback
from dataclasses import dataclass

from . import NotAttempted, Wrong
from .registry import Exercise, build_exercises
from .swap import is_stub, load_file

HERE = os.path.dirname(os.path.abspath(__file__))


def exercises_dir() -> str:
    return os.path.expanduser(os.environ.get("MINISGL_EXERCISES_DIR", "~/minisgl-exercises"))


def stub_path(chapter: int) -> str:
    return os.path.join(HERE, "stubs", f"ch{chapter:02d}.py")


def solution_path(chapter: int) -> str:
    return os.path.join(HERE, "solutions", f"ch{chapter:02d}.py")


def reader_path(chapter: int, create: bool = True) -> str:
    """Your file for `chapter`; the first time, a copy of the packaged stub."""
    path = os.path.join(exercises_dir(), f"ch{chapter:02d}.py")
    if create and not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copy(stub_path(chapter), path)
    return path


@dataclass
class Result:
    exercise: Exercise
    status: str  # "correct" | "not attempted" | "wrong"
    message: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "correct"

    def line(self) -> str:
        msg = f": {self.message}" if self.message else ""
        return f"ch{self.exercise.chapter:02d}  {self.exercise.name:<17} {self.status}{msg}  ({self.seconds:.1f} s)"


def _your_frame(e: BaseException, path: str) -> str:
    """' (your file, line N)' for the deepest frame of the traceback inside the reader's file."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == os.path.abspath(path)]
    return f" (your file, line {frames[-1].lineno})" if frames else ""


LIMIT_S = 180  # per exercise; a correct one takes seconds


class GradeTimeout(BaseException):  # not an Exception: the grader's own handlers must not swallow it
    pass


@contextlib.contextmanager
def time_limit(seconds: int):
    """Stop a grade that runs too long (the reader's endless loop); main thread on POSIX only, else no limit."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise GradeTimeout()
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def grade_one(ex: Exercise, path: str) -> Result:
    t0 = time.perf_counter()
    done = lambda status, msg="": Result(ex, status, msg, time.perf_counter() - t0)
    try:
        module = load_file(path)
    except Exception as e:
        return done("wrong", f"your file {path} does not import: {type(e).__name__}: {e}")
    fns = [getattr(module, f, None) for f in ex.funcs]
    if any(f is None for f in fns):
        return done("wrong", f"your file defines no function {[f for f, g in zip(ex.funcs, fns) if g is None][0]}")
    if any(is_stub(f) for f in fns):
        return done("not attempted")
    grader = getattr(importlib.import_module(f"{__package__}.graders.ch{ex.chapter:02d}"), f"grade_{ex.name}")
    try:
        with time_limit(LIMIT_S):
            grader(ex, path, module)
    except GradeTimeout:
        return done("wrong", f"grading did not finish within {LIMIT_S} s: does your code loop forever on some input?")
    except NotAttempted:
        return done("not attempted")
    except Wrong as e:
        return done("wrong", str(e).split("\n")[0])
    except Exception as e:
        return done("wrong", f"your code raised {type(e).__name__}: {e}{_your_frame(e, path)}")
    return done("correct")


def grade_chapter(chapter: int, path: str | None = None, solution: bool = False, only: str | None = None) -> list[Result]:
    path = solution_path(chapter) if solution else (path or reader_path(chapter))
    return [grade_one(ex, path) for ex in build_exercises(chapter) if only in (None, ex.name)]

