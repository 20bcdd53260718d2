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

# The build exercises, two lines each: chapter, the function's name, minutes, the library attributes it
# replaces ("module:Attr.path" under minisgl_edu); then what it does. How a few plug in differently: SPECIAL.
BUILD = r"""
1  encode            25  messages:encode server.queues:encode
   the schema-less encoder: a message dataclass -> msgpack bytes (1-D CPU tensors only)
1  decode            20  messages:decode server.queues:decode
   the decoder: bytes -> only the classes in MESSAGE_TYPES, tensors rebuilt from raw bytes
1  feed              15  server.queues:Frames.feed
   Frames.feed: cut a stream socket's bytes back into whole messages, each behind its 4-byte length
2  complete_one      10  req:Req.complete_one
   Req.complete_one: move the three-length window by one token
3  pages_to_finish   15  prefill:pages_to_finish scheduler:pages_to_finish
   the reserved size of one request: pages it may still allocate (mind the partial page)
3  try_add           45  prefill:PrefillAdder.try_add
   PrefillAdder.try_add: the five admission conditions, the two budgets, chunking
4  assign_locations  40  paging:PagePool.assign_locations
   PagePool.assign_locations: a slot per new position, continuing a partial page
4  free_tail         15  paging:PagePool.free_tail
   PagePool.free_tail: give back a finished request's own pages, partial last page included
5  walk              35  radix:RadixCache._walk
   RadixCache._walk (behind match_prefix/insert_prefix): follow the key, split where it diverges, whole pages only
5  split             15  radix:RadixCache._split
   RadixCache._split: cut an edge in two, keys and KV locations kept aligned
5  evict             30  radix:RadixCache.evict
   RadixCache.evict: free least-recently-used unlocked leaves until enough tokens are freed
6  overlap_step      40  scheduler:Scheduler.step
   one call of the overlap loop: launch step N+1, then process step N; defer freed rows
7  kernel_args       35  attention.base:kernel_args
   the ledger -> cu_seqlens_q/k, seq_lens_k, kv_indices, padded to a captured batch size
8  linear_shards     30  model.layers:ColumnParallelLinear._load model.layers:RowParallelLinear._load
   column- and row-parallel linear layers: which rows / columns of W a rank loads
8  receive           25  tp:receive
   tp.receive: rank 0 takes what arrived and broadcasts the count; the others take exactly that many
9  detokenize_next   25  server.tokenizer:detokenize_next
   incremental detokenization that holds back a broken UTF-8 tail
"""
SPECIAL = {
    "overlap_step": dict(adapter=M + "exercises.swap:overlap_only"),
    "kernel_args": dict(adapter=M + "exercises.padded_decode:install"),
    "linear_shards": dict(functions=("column_load", "row_load")),
    "detokenize_next": dict(fixed=((M + "server.tokenizer:batch_decoder", M + "exercises.swap:no_batch_decoder"),)),
}


def _build(table: str):
    lines = table.strip().splitlines()
    for head, text in zip(lines[::2], lines[1::2]):
        ch, name, minutes, *targets = head.split()
        yield Exercise(int(ch), name, B, text.strip(), tuple(M + t for t in targets), minutes=int(minutes),
                       **SPECIAL.get(name, {}))


# The predict exercises: answer cells in the notebooks, graded there (solutions in notebooks/solutions/chNN.py).
# One a line: chapter, the answer's name, what you predict.
PREDICT = r"""
1  buffer_bytes            bytes of a UserMsg's tensor buffer for n tokens
1  num_acks                acks the launcher waits for with tp ranks and n tokenizers
1  held_back               which tokens of '日本 🙂' the detokenizer holds back
2  exercise_1              (cached_len, device_len, remain_len) after a prefill and two decode steps
2  num_batch_tokens        entries of input_ids / positions / out_loc for a batch of windows
2  resubmitted_cached_len  cached_len of a fully cached prompt submitted again
3  chunks_at_48            chunk sizes of the 150-token prompt at a token budget of 48
3  pages_needed            pages a request may still allocate (the reserved size's arithmetic)
3  largest_max_tokens      largest max_tokens still admitted next to two running requests
4  new_pages               pages assign_locations takes for one request's extension
4  next_slot               the slot of request 1's next token in the page-size-4 pool
4  waste                   unused slots and pages held at device_len 100, page size 16
5  match_1                 tokens of [1, 2, 3, 7, 9] that match
5  match_2                 tokens that match with page size 4
5  victim                  which leaf evict(1) drops after A is matched again
5  sizes                   (evictable_size, protected_size) after a lock
6  calls_until_finished    step() calls until a max_tokens=3 request finishes, overlap on
6  idle_share              the GPU idle share of a list of step intervals
7  cu_seqlens_k            cu_seqlens_k for device_len 7, 3 and 12
7  padded_size             the captured size that runs a decode batch of 37
8  kv_head_of_rank5        which KV head rank 5 keeps (16 q heads, 2 KV heads, tp=8)
8  vocab_shard             embedding rows per rank and zero rows of the last, vocab 250 at tp=4
8  all_reduces_per_forward all-reduces in one forward of the 2-layer model at tp=2
9  sse_text                the answer text of a chat stream from its raw data: lines
9  stop_outputs            what the API emits for three pieces with stop=['\n\n']
9  num_events              data: events of a stream with k pieces and include_usage
"""


def _predict(table: str):
    per_chapter: dict[int, int] = {}
    for line in table.strip().splitlines():
        ch, name, text = line.split(maxsplit=2)
        n = per_chapter[int(ch)] = per_chapter.get(int(ch), 0) + 1
        yield Exercise(int(ch), name, P, text, where=f"notebook {int(ch):02d}, exercise {n}")


EXERCISES: tuple[Exercise, ...] = _ordered((
    *_build(BUILD),
    *_predict(PREDICT),
))


def build_exercises(chapter: int | None = None) -> list[Exercise]:
    return [e for e in EXERCISES if e.kind == B and (chapter is None or e.chapter == chapter)]


def by_id(ex_id: str) -> Exercise:
    for e in EXERCISES:
        if e.id == ex_id:
            return e
    raise KeyError(ex_id)
