"""detokenize_next that never moves the window: text is sent again and again.

EXPECT: not how the text
"""

from minisgl_edu.exercises.swap import patched

detokenize_next = patched("minisgl_edu.server.tokenizer:detokenize_next",
    ('state.prefix_offset, state.read_offset = state.read_offset, len(state.ids)',
     'pass'),
    calls=("emit",))
