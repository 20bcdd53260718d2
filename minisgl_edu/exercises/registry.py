"""Every exercise of the course: which function you write, where it plugs into the library, who grades it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    chapter: int
    name: str  # the function's name in your chNN.py
    kind: str  # "build" (you write library code; `check` grades it) | "predict" (a notebook answer cell)
    description: str
    targets: tuple[str, ...] = ()  # "module:Attr.path" the function replaces while it is graded
    functions: tuple[str, ...] = ()  # your functions, one per target (default: `name` for every target)
    adapter: str | None = None  # "module:function" turning (your function, the original) into what is installed
    fixed: tuple[tuple[str, str], ...] = ()  # (target, "module:value") also installed: a fast path that would skip yours
    minutes: int = 0  # roughly how long it takes (the build-path page)
    where: str = ""  # the notebook cell of a predict exercise

    @property
    def funcs(self) -> tuple[str, ...]:
        return self.functions or (self.name,) * len(self.targets)

    @property
    def id(self) -> str:
        return f"ch{self.chapter:02d}.{self.name}"


def _ordered(exs) -> tuple:
    return tuple(sorted(exs, key=lambda e: (e.chapter, e.kind != "build")))


B, P = "build", "predict"
M = "minisgl_edu."

EXERCISES: tuple[Exercise, ...] = _ordered((
    Exercise(1, "encode", B, "the schema-less encoder: a message dataclass -> msgpack bytes (1-D CPU tensors only)",
             (M + "messages:encode", M + "server.queues:encode"), minutes=25),
    Exercise(1, "decode", B, "the decoder: bytes -> only the classes in MESSAGE_TYPES, tensors rebuilt from raw bytes",
             (M + "messages:decode", M + "server.queues:decode"), minutes=20),
    Exercise(2, "complete_one", B, "Req.complete_one: move the three-length window by one token",
             (M + "req:Req.complete_one",), minutes=10),
    Exercise(3, "pages_to_finish", B, "the reserved size of one request: pages it may still allocate (mind the partial page)",
             (M + "prefill:pages_to_finish", M + "scheduler:pages_to_finish"), minutes=15),
    Exercise(3, "try_add", B, "PrefillAdder.try_add: the five admission conditions, the two budgets, chunking",
             (M + "prefill:PrefillAdder.try_add",), minutes=45),
    Exercise(4, "assign_locations", B, "PagePool.assign_locations: a slot per new position, continuing a partial page",
             (M + "paging:PagePool.assign_locations",), minutes=40),
    Exercise(4, "free_tail", B, "PagePool.free_tail: give back a finished request's own pages, partial last page included",
             (M + "paging:PagePool.free_tail",), minutes=15),
    Exercise(5, "walk", B, "RadixCache._walk (behind match_prefix/insert_prefix): follow the key, split where it diverges, whole pages only",
             (M + "radix:RadixCache._walk",), minutes=35),
    Exercise(5, "split", B, "RadixCache._split: cut an edge in two, keys and KV locations kept aligned",
             (M + "radix:RadixCache._split",), minutes=15),
    Exercise(5, "evict", B, "RadixCache.evict: free least-recently-used unlocked leaves until enough tokens are freed",
             (M + "radix:RadixCache.evict",), minutes=30),
    Exercise(6, "overlap_step", B, "one call of the overlap loop: launch step N+1, then process step N; defer freed rows",
             (M + "scheduler:Scheduler.step",), adapter=M + "exercises.swap:overlap_only", minutes=40),
    Exercise(7, "kernel_args", B, "the ledger -> cu_seqlens_q/k, seq_lens_k, kv_indices, padded to a captured batch size",
             (M + "attention.base:kernel_args",), adapter=M + "exercises.padded_decode:install", minutes=35),
    Exercise(8, "linear_shards", B, "column- and row-parallel linear layers: which rows / columns of W a rank loads",
             (M + "model.layers:ColumnParallelLinear._load", M + "model.layers:RowParallelLinear._load"),
             functions=("column_load", "row_load"), minutes=30),
    Exercise(8, "receive", B, "tp.receive: rank 0 takes what arrived and broadcasts the count; the others take exactly that many",
             (M + "tp:receive",), minutes=25),
    Exercise(9, "detokenize_next", B, "incremental detokenization that holds back a broken UTF-8 tail",
             (M + "server.tokenizer:detokenize_next",), minutes=25,
             fixed=((M + "server.tokenizer:batch_decoder", M + "exercises.swap:no_batch_decoder"),)),
    # predict exercises: answer cells in the notebooks (graded there; solutions in notebooks/solutions/chNN.py)
    *(Exercise(ch, name, P, text, where=f"notebook {ch:02d}, exercise {i + 1}") for ch, items in {
        1: [("buffer_bytes", "bytes of a UserMsg's tensor buffer for n tokens"),
            ("num_acks", "acks the launcher waits for with tp ranks and n tokenizers"),
            ("held_back", "which tokens of '日本 🙂' the detokenizer holds back")],
        2: [("exercise_1", "(cached_len, device_len, remain_len) after a prefill and two decode steps"),
            ("num_batch_tokens", "entries of input_ids / positions / out_loc for a batch of windows"),
            ("resubmitted_cached_len", "cached_len of a fully cached prompt submitted again")],
        3: [("chunks_at_48", "chunk sizes of the 150-token prompt at a token budget of 48"),
            ("pages_needed", "pages a request may still allocate (the reserved size's arithmetic)"),
            ("largest_max_tokens", "largest max_tokens still admitted next to two running requests")],
        4: [("new_pages", "pages assign_locations takes for one request's extension"),
            ("next_slot", "the slot of request 1's next token in the page-size-4 pool"),
            ("waste", "unused slots and pages held at device_len 100, page size 16")],
        5: [("match_1", "tokens of [1, 2, 3, 7, 9] that match"),
            ("match_2", "tokens that match with page size 4"),
            ("victim", "which leaf evict(1) drops after A is matched again"),
            ("sizes", "(evictable_size, protected_size) after a lock")],
        6: [("calls_until_finished", "step() calls until a max_tokens=3 request finishes, overlap on"),
            ("idle_share", "the GPU idle share of a list of step intervals")],
        7: [("cu_seqlens_k", "cu_seqlens_k for device_len 7, 3 and 12"),
            ("padded_size", "the captured size that runs a decode batch of 37")],
        8: [("kv_head_of_rank5", "which KV head rank 5 keeps (16 q heads, 2 KV heads, tp=8)"),
            ("vocab_shard", "embedding rows per rank and zero rows of the last, vocab 250 at tp=4"),
            ("all_reduces_per_forward", "all-reduces in one forward of the 2-layer model at tp=2")],
        9: [("sse_text", "the answer text of a chat stream from its raw data: lines"),
            ("stop_outputs", "what the API emits for three pieces with stop=['\\n\\n']"),
            ("num_events", "data: events of a stream with k pieces and include_usage")],
    }.items() for i, (name, text) in enumerate(items)),
))


def build_exercises(chapter: int | None = None) -> list[Exercise]:
    return [e for e in EXERCISES if e.kind == B and (chapter is None or e.chapter == chapter)]


def by_id(ex_id: str) -> Exercise:
    for e in EXERCISES:
        if e.id == ex_id:
            return e
    raise KeyError(ex_id)
