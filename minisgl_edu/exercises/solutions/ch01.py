"""Chapter 1's reference solution: the library's own wire format, `minisgl_edu/messages.py`, and the replies'
framing, `Frames.feed` in `minisgl_edu/server/queues.py`."""
from minisgl_edu.messages import decode, encode  # noqa: F401
from minisgl_edu.server.queues import Frames

feed = Frames.feed
