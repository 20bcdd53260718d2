"""The stubs you start from: `python -m minisgl_edu.exercises check NN` copies chNN.py to your folder. Each
function has the library's signature (tests/test_exercises.py checks it) and a docstring saying what to write."""
