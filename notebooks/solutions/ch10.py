"""Solutions to the exercises of notebook 10 (mixture of experts)."""
import torch

from minisgl_edu.model.moe import ExpertGroups


def weights():
    # top-2 of [0.1, 0.4, 0.2, 0.3] are experts 1 and 3; renormalised: 0.4 / 0.7 and 0.3 / 0.7
    return (4 / 7, 3 / 7)


def distinct():
    return 8 * (1 - (1 - 2 / 8) ** 4)  # each expert is missed by one token with probability 6/8, by all four with (6/8)^4


def shard():
    return (128, 2 * 768 // 4, 2048)  # every expert kept, a quarter of its gate rows and of its up rows


def group_by_expert(experts: torch.Tensor, num_experts: int) -> ExpertGroups:
    """The grouping as a loop over experts: expert 0's (token, choice) pairs first, then expert 1's, ..."""
    flat = experts.reshape(-1)
    order = torch.cat([torch.nonzero(flat == e).flatten() for e in range(num_experts)])
    counts = torch.stack([(flat == e).sum() for e in range(num_experts)])
    return ExpertGroups(order, order // experts.shape[-1], counts, torch.cumsum(counts, 0).to(torch.int32))
