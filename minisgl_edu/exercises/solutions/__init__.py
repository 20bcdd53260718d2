"""The reference solutions of the build exercises (`check NN --solution`): the library's own functions.

Each chNN.py names, under the exercise's function names, the library code the exercise swaps out, so
the reference a reader compares with is the code the engine runs (and `tests/test_oracle.py` checks)."""
