"""Chapter 6's reference solution: `Scheduler.step` in `minisgl_edu/scheduler.py` (its overlap branch
is the one graded: the exercise's adapter calls it only for a scheduler with overlap on)."""
from minisgl_edu.scheduler import Scheduler

overlap_step = Scheduler.step
