"""The build exercises (minisgl_edu/exercises): every reference solution (the library's own function) passes, every shipped stub is
"not attempted", and every deliberately wrong implementation in tests/exercise_mutants/ fails with a
message naming its problem (the EXPECT line of its docstring)."""
from __future__ import annotations

import glob
import io
import os
import re
from contextlib import redirect_stdout

import pytest

from minisgl_edu.exercises.grade import grade_chapter, grade_one, solution_path, stub_path
from minisgl_edu.exercises.registry import EXERCISES, build_exercises, by_id

HERE = os.path.dirname(os.path.abspath(__file__))
MUTANTS = sorted(glob.glob(os.path.join(HERE, "exercise_mutants", "ch*.py")))
CHAPTERS = range(1, 10)


def mutant_exercise(path: str):
    name = os.path.basename(path)
    ch = int(name[2:4])
    return next(e for e in build_exercises(ch) if name[5:].startswith(e.name + "_"))


def test_list_prints_one_line_per_exercise():
    from minisgl_edu.exercises.__main__ import main
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["list"]) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == len(EXERCISES)
    assert all(re.fullmatch(r"ch0[1-9]  \w+  (build|predict)  \S.*", line) for line in lines), lines
    builds = build_exercises()
    assert len(builds) >= 12
    per = {ch: sum(e.chapter == ch for e in builds) for ch in CHAPTERS}
    assert all(per[ch] >= 1 for ch in CHAPTERS) and all(per[ch] >= 2 for ch in (3, 4, 5)), per


def test_solutions_are_the_library_itself():
    """The reference solution of an exercise is the library attribute it replaces, not a copy of it."""
    from minisgl_edu.exercises.swap import _resolve, load_file
    for ex in build_exercises():
        mod = load_file(solution_path(ex.chapter))
        for target, fname in zip(ex.targets, ex.funcs):
            owner, attr = _resolve(target)
            original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
            assert getattr(mod, fname) is original, (ex.id, target)


def test_stubs_are_stubs_with_the_library_signatures():
    """Each stub function is still only `raise NotAttempted` (with a docstring saying what to write) and takes
    the parameters (names, kinds, defaults) of the library attribute it replaces: a library signature that
    moves on shows here, not as a reader's TypeError in the engine."""
    import inspect

    from minisgl_edu.exercises.swap import _resolve, is_stub, load_file
    params = lambda f: [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]
    for ex in build_exercises():
        mod = load_file(stub_path(ex.chapter))
        for target, fname in zip(ex.targets, ex.funcs):
            owner, attr = _resolve(target)
            original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
            stub = getattr(mod, fname)
            assert is_stub(stub) and stub.__doc__, (ex.id, fname)
            assert params(stub) == params(original), (ex.id, target)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_stub_is_not_attempted(chapter):
    results = grade_chapter(chapter, stub_path(chapter))
    assert [r.status for r in results] == ["not attempted"] * len(results), [r.line() for r in results]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_passes(chapter):
    results = grade_chapter(chapter, solution=True)
    assert all(r.passed for r in results), [r.line() for r in results]


def test_every_exercise_has_two_mutants():
    count = {e.id: 0 for e in build_exercises()}
    for m in MUTANTS:
        count[mutant_exercise(m).id] += 1
    assert all(n >= 2 for n in count.values()), count


@pytest.mark.parametrize("path", MUTANTS, ids=[os.path.basename(m)[:-3] for m in MUTANTS])
def test_mutant_fails_naming_the_problem(path):
    expect = re.search(r"EXPECT: (.*)", open(path).read()).group(1)
    r = grade_one(mutant_exercise(path), path)
    assert r.status == "wrong", r.line()
    assert expect in r.message, r.line()
    assert "\n" not in r.message and "Traceback" not in r.message


def test_patched_edits_exactly_one_place_of_the_library_source():
    """The mutants above are edits of the library's source (swap.patched): an `old` text that no longer
    occurs, or occurs twice, is refused, so a library change cannot silently make a mutant the library."""
    from minisgl_edu.exercises.swap import patched, swapped
    from minisgl_edu.req import Req, SamplingParams
    twin = patched("minisgl_edu.req:Req.complete_one", ("self.device_len += 1", "self.device_len += 2"))
    mine, lib = (Req(0, [1, 2, 3], SamplingParams(max_tokens=4)) for _ in range(2))
    mine.device_len = lib.device_len = 3
    twin(mine)
    lib.complete_one()  # the library's own method is left as it was
    assert [(r.cached_len, r.device_len) for r in (mine, lib)] == [(3, 5), (3, 4)]
    with pytest.raises(ValueError, match="occurs 0 times"):
        patched("minisgl_edu.req:Req.complete_one", ("self.device_len += 3", ""))
    with pytest.raises(ValueError, match="occurs 2 times"):
        patched("minisgl_edu.req:Req.complete_one", ("self.device_len", ""))
    with swapped([by_id("ch02.complete_one")], lambda e: os.path.join(HERE, "exercise_mutants", "ch02_complete_one_skips_token.py")):
        with pytest.raises(ValueError, match="not the library's"):  # a swapped-in function is not the library's code
            patched("minisgl_edu.req:Req.complete_one")


def test_cli_exit_codes_and_default_file(tmp_path, monkeypatch):
    from minisgl_edu.exercises.__main__ import main
    monkeypatch.setenv("MINISGL_EXERCISES_DIR", str(tmp_path))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["check", "2"]) == 1  # first check: the stub is copied to tmp_path/ch02.py
    assert "not attempted" in out.getvalue() and "correct" not in out.getvalue().replace("0 of 1 correct", "")
    assert (tmp_path / "ch02.py").read_text() == open(stub_path(2)).read()
    (tmp_path / "ch02.py").write_text(open(solution_path(2)).read())
    with redirect_stdout(io.StringIO()):
        assert main(["check", "2"]) == 0
        assert main(["check", "2", "--file", os.path.join(HERE, "exercise_mutants", "ch02_complete_one_skips_token.py")]) == 1


def test_capstone_all_solutions_swapped_give_the_library_tokens():
    """Every build exercise's solution installed at once (as `serve --exercises` does) on the standard cases."""
    from minisgl_edu.exercises.oracle import STANDARD_CASES, Case, reference, run_case
    from minisgl_edu.exercises.swap import swapped
    cases = STANDARD_CASES + (Case(4, 16, 256, 4, overlap=True),)
    refs = [reference(c).tokens for c in cases]
    with swapped(build_exercises(), lambda e: solution_path(e.chapter)):
        mine = [run_case(c).tokens for c in cases]
    assert mine == refs


def test_serve_with_exercises_runs_the_readers_code_in_every_process(tmp_path):
    """`serve --exercises FOLDER`: every solution, except ch09.py, which is a deliberately wrong detokenizer
    that holds all text back until the end. The text equals the offline engine's, and the stream arrives
    as one piece: the detokenizer *process* ran the folder's function."""
    import json
    import shutil
    import signal
    import subprocess
    import sys

    import httpx
    from minisgl_edu.bench_serve import free_port, wait_healthy
    for ch in range(1, 9):
        shutil.copy(solution_path(ch), tmp_path / f"ch{ch:02d}.py")
    shutil.copy(os.path.join(HERE, "exercise_mutants", "ch09_detokenize_next_hold_all.py"), tmp_path / "ch09.py")
    port = free_port()
    log = open(tmp_path / "serve.log", "w")  # a file, not a pipe: a full pipe would block the server
    proc = subprocess.Popen([sys.executable, "-m", "minisgl_edu.serve", "--exercises", str(tmp_path), "--port", str(port)],
                            stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, proc)
        except RuntimeError as e:
            raise AssertionError((tmp_path / "serve.log").read_text()) from e
        body = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}
        text = httpx.post(url + "/v1/completions", json=body, timeout=120).json()["choices"][0]["text"]
        with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=120) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        pieces = [e["choices"][0]["text"] for e in events if e.get("choices") and e["choices"][0]["text"]]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    from minisgl_edu import LLM, SamplingParams
    offline = LLM(device="cpu").generate(["The capital of France is"], SamplingParams(max_tokens=12), use_tqdm=False)
    assert text == offline[0]["text"] == "".join(pieces)
    assert len(pieces) == 1, pieces  # held back to the end: the detokenizer process ran ch09.py's function
    assert "exercises swapped in: ch01.encode" in (tmp_path / "serve.log").read_text()


def test_padded_decode_checks_the_padding_lanes_and_trims_them():
    """ch07's adapter (exercises/padded_decode.py): a CPU decode step also asks for the lanes of a captured
    size; padding lanes that are missing or read a real page are named; right ones are cut off again, so
    the reference backend reads exactly the library's arguments for the real lanes."""
    from dataclasses import replace

    import torch

    from minisgl_edu.attention.metadata import kernel_args
    from minisgl_edu.exercises import Wrong
    from minisgl_edu.exercises.padded_decode import install
    from minisgl_edu.paging import PagePool
    from minisgl_edu.req import Req, SamplingParams
    pool = PagePool(32, 4, 8, 64, torch.device("cpu"))
    reqs = []
    for i, n in enumerate((5, 9, 2)):  # decode-shaped: one new token each
        r = Req(i, [1] * 20, SamplingParams(max_tokens=1))
        r.table_idx, r.device_len = pool.take_row(), n
        pool.assign_locations([r])
        r.cached_len = n - 1
        reqs.append(r)

    def real_row_padding(reqs, pool, padded_size=0):
        args = kernel_args(reqs, pool, padded_size)
        k = int(args.cu_seqlens_k[len(reqs)])
        return replace(args, kv_indices=torch.cat([args.kv_indices[:k], pool.page_table[0, :len(args.kv_indices) - k]]))

    with pytest.raises(Wrong, match="padding lane 3 reads slots"):
        install(real_row_padding, kernel_args)(reqs, pool)
    with pytest.raises(Wrong, match="gave 3 query lanes"):
        install(lambda reqs, pool, padded_size=0: kernel_args(reqs, pool), kernel_args)(reqs, pool)
    got, want = install(kernel_args, kernel_args)(reqs, pool), kernel_args(reqs, pool)
    for f in ("cu_seqlens_q", "cu_seqlens_k", "seq_lens_k", "kv_indices", "last_page_len"):
        assert getattr(got, f).tolist() == getattr(want, f).tolist(), f
    assert got.num_padding == 0
    assert install(kernel_args, kernel_args)(reqs, pool, 8).num_padding == 5  # a GPU's padded step: passed through
