"""detokenize_next that sends nothing until the last token.

EXPECT: as soon as it decodes
"""

from minisgl_edu.exercises.swap import patched

detokenize_next = patched("minisgl_edu.server.tokenizer:detokenize_next",
    (r'(final or not window.endswith("\ufffd"))',
     'final'),
    ('if decode is not None and len(state.ids) - state.read_offset >= HOLD_LIMIT:',
     'if False:'),
    calls=("emit",))
