"""detokenize_next that sends whatever decodes, broken tail included.

EXPECT: half a character
"""

from minisgl_edu.exercises.swap import patched

detokenize_next = patched("minisgl_edu.server.tokenizer:detokenize_next",
    (r' and (final or not window.endswith("\ufffd"))',
     ''),
    calls=("emit",))
