"""Solutions to the exercises of notebook 06 (overlap scheduling)."""
from __future__ import annotations


def calls_until_finished(max_tokens: int, overlap: bool) -> int:
    """One call per step; the overlap loop hands step N's results back one call later."""
    return max_tokens + (1 if overlap else 0)


def idle_share(gpu_steps_ms: list[tuple[float, float]]) -> float:
    """Gaps between consecutive GPU steps over the span from the first start to the last end."""
    gaps = sum(max(0.0, b[0] - a[1]) for a, b in zip(gpu_steps_ms, gpu_steps_ms[1:]))
    return gaps / (gpu_steps_ms[-1][1] - gpu_steps_ms[0][0])
