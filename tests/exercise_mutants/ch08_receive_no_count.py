"""receive where every rank takes what it has seen (no broadcast count).

EXPECT: every rank must receive
"""

from minisgl_edu.exercises.swap import patched

receive = patched("minisgl_edu.tp:receive",
    ('raws = inbox.take(block) if _TP.is_primary or not use_count else []',
     'raws, use_count = inbox.take(block), False'))
