"""Chapter 2's reference solution: `Req.complete_one` in `minisgl_edu/req.py`."""
from minisgl_edu.req import Req

complete_one = Req.complete_one
