"""Solutions to the exercises of notebook 01 (processes and boundaries)."""


def buffer_bytes(num_tokens):
    return 4 * num_tokens  # int32 token ids: four raw bytes each, no per-element framing


def num_acks(tp, num_tokenizers):
    return 1 + num_tokenizers + 1  # the primary scheduler rank, every tokenizer, the detokenizer; tp does not matter


def held_back(pieces):
    return [i for i, p in enumerate(pieces) if p == ""]  # the tokens that ended inside a character
