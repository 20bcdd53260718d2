"""python -m minisgl_edu.exercises list | check NN [--file PATH] [--solution] [--only NAME]"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads spinning on a shared machine cost 10x


def main(argv=None) -> int:
    from .grade import exercises_dir, grade_chapter, reader_path
    from .registry import EXERCISES
    ap = argparse.ArgumentParser(prog="python -m minisgl_edu.exercises",
                                 description="Build the engine yourself: list the exercises, or grade a chapter's.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="one line per exercise: chNN  name  build|predict  description")
    c = sub.add_parser("check", help="grade a chapter's build exercises (exit 0 when all pass)")
    c.add_argument("chapter", type=int, help="the chapter number, 1-9")
    c.add_argument("--file", default=None, help=f"grade this file (default: {exercises_dir()}/chNN.py)")
    c.add_argument("--solution", action="store_true", help="grade the reference solution instead")
    c.add_argument("--only", default=None, help="grade one exercise of the chapter, by name")
    k = sub.add_parser("capstone", help="the default model, the library's engine vs one with all your mechanisms")
    k.add_argument("--exercises", default=None, help=f"your exercises folder (default: {exercises_dir()})")
    k.add_argument("--solution", action="store_true", help="use the reference solutions as your files")
    a = ap.parse_args(argv)
    if a.cmd == "capstone":
        from .capstone import capstone
        return capstone(a.exercises or exercises_dir(), a.solution)
    if a.cmd == "list":
        for e in EXERCISES:
            print(f"ch{e.chapter:02d}  {e.name}  {e.kind}  {e.description}")
        return 0
    if not 1 <= a.chapter <= 9:
        ap.error("chapter must be 1..9")
    if a.file is None and not a.solution:
        path = reader_path(a.chapter)
        print(f"grading {path}  (edit it, then run this again)")
    results = grade_chapter(a.chapter, a.file, a.solution, a.only)
    if not results:
        ap.error(f"chapter {a.chapter} has no build exercise named {a.only!r}")
    for r in results:
        print(r.line())
    n = sum(r.passed for r in results)
    print(f"chapter {a.chapter}: {n} of {len(results)} correct")
    return 0 if n == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
