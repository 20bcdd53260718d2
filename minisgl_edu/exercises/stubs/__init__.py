"""The stubs you start from: `python -m minisgl_edu.exercises check NN` copies chNN.py to your folder (generated from solutions/ by grade.make_stub; tests/test_exercises.py keeps them in sync)."""
