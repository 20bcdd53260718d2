"""What the notebooks' exercise cells call: show your build-exercise file and grade it, and say
"not attempted" for a predict answer left as None. Neither ever raises for an untouched exercise."""
from __future__ import annotations

import ast

from .grade import grade_chapter, reader_path
from .registry import build_exercises

NOT_ATTEMPTED = "not attempted: write your answer in the cell above, then run this cell again"


def signatures(path: str, names: set[str]) -> str:
    """The `def` line and docstring of each function in `names`, as written in `path`."""
    src = open(path).read()
    lines = src.splitlines()
    out = []
    for node in ast.parse(src).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            body = node.body
            end = body[0].end_lineno if body and isinstance(body[0], ast.Expr) else node.lineno
            out.append("\n".join(lines[node.lineno - 1:end]))
    return "\n\n".join(out)


def build_cell(chapter: int, show: bool = True) -> bool:
    """Print where your file for `chapter` is (created from the stub the first time), the functions to
    write, and the grade of each. Returns True when all of them are correct."""
    path = reader_path(chapter)
    names = {f for e in build_exercises(chapter) for f in e.funcs}
    print(f"your file: {path}\n(open it in any editor; grade from a shell with "
          f"`python -m minisgl_edu.exercises check {chapter:02d}`, or re-run this cell)\n")
    if show:
        print(signatures(path, names) + "\n")
    results = grade_chapter(chapter, path)
    for r in results:
        print(r.line())
    return all(r.passed for r in results)


def verdict(attempted: bool, *shown) -> None:
    """The last line of a predict exercise's check: "correct" for your answer; for None, "not attempted"
    (the cell has checked the provided solution instead, so CI keeps the solutions right)."""
    print(*(("correct:",) + shown if shown else ("correct",))) if attempted else print(NOT_ATTEMPTED)
