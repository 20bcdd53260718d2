"""Solutions to the exercises of notebook 08 (tensor parallelism)."""


def kv_head_of_rank5():
    return 1  # 8 ranks share 2 KV heads: ranks 0-3 keep KV head 0, ranks 4-7 keep KV head 1


def vocab_shard():
    return (63, 2)  # ceil(250 / 4) = 63 rows per rank; the last rank owns 250 - 3 * 63 = 61 real rows + 2 zero rows


def all_reduces_per_forward():
    return 5  # per layer: o_proj and down_proj (2 x 2 layers), plus the vocab-parallel embedding
