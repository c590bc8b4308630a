"""How a small torch network runs on the CPU without disturbing its caller.

A decision is one forward of a network of a few hundred thousand parameters: more intra-op threads
only spin, and on a machine the agent's own tools keep busy (builds, test suites) they wait on each
other for milliseconds.  These context managers set what a block needs and restore the caller's
setting after, since both are process-wide (threads) or thread-wide (the subnormal flag) state that
the caller may have set for its own work.  torch is looked up in ``sys.modules`` or imported on first
use, so that importing this module costs nothing to callers that never run a network (rule policies).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

__all__ = ["flushed_denormals", "torch_threads"]

_SUBNORMAL = None


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads and restore the caller's count after (nothing
    when ``n`` is None or 0, or torch was never imported: rule policies do not need it)."""
    torch = sys.modules.get("torch")
    if not n or torch is None:
        yield
        return
    before = torch.get_num_threads()
    if before == n:  # the usual case: a decision costs no call into OpenMP
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def flushed_denormals() -> Iterator[None]:
    """Run the block with subnormal floats (below 1.2e-38) flushed to zero on the calling thread, then
    restore the flag as it was (probed by a subnormal product: torch has no getter).  Attention over a
    window whose outputs are mostly hidden makes subnormal intermediates, and CPU arithmetic on them
    is many times slower: a forward of one trained network took 1.29 ms instead of 0.68 ms on such a
    window (docs/benchmarks.md).  A probability does not change by what is flushed.  Only the calling
    thread's flag is set: with more than one intra-op thread the others are not flushed."""
    global _SUBNORMAL
    import torch

    if _SUBNORMAL is None:  # 2**-129 made from its bits, so that a flush already on cannot zero it
        _SUBNORMAL = torch.tensor([1 << 20], dtype=torch.int32).view(torch.float32)
    was_flushed = float((_SUBNORMAL * 1.0)[0]) == 0.0
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was_flushed)
