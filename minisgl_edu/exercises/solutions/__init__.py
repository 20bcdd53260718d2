"""The reference solutions of the build exercises (`check NN --solution`)."""
