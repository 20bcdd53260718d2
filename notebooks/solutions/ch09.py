"""Solutions to the exercises of notebook 09 (the full server)."""
import json


def sse_text(lines):
    text = []
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                text.append(choice["delta"].get("content") or "")
    return "".join(text)


def stop_outputs():
    # "Hello" is safe; "\n" might begin "\n\n" (held back); "\nWorld" completes the stop string
    return ["Hello", "", ""]


def num_events(k):
    return k + 4  # the role chunk, k content chunks, the finish chunk, the usage chunk, [DONE]
