"""Hand-built episodes with round token counts, for cost tests whose figures are computed by hand."""

from __future__ import annotations

import numpy as np

from dtoc_rl.data.schema import NEED_KINDS
from dtoc_rl.sim.episode import NEVER, Episode
from dtoc_rl.sim.pricing import Prices

#: $1 / $2 / $10 per token (x 1e6 per million): every bill is a small integer of dollars.
UNIT = Prices(input=2e6, output=10e6, cache_read=1e6, cache_write=2e6, source="test")


def make_episode(
    base: int,
    user: list[int],
    asst: list[int],
    vis: list[int],
    hid: list[int],
    needs: dict[int, list[int]] | None = None,
    family: str = "gpt-4o",
    calls: list[int] | None = None,
) -> Episode:
    """An episode whose step k sends ``user[k]`` tokens, answers ``asst[k]``, and (when ``vis[k]``)
    gets an output of ``vis[k]`` tokens whose placeholder is ``hid[k]``; ``needs`` maps a step to
    the earlier steps it needs (provenance); ``calls`` lists the first step of each model call
    (parallel tool calls of one turn; default: every step is a call)."""
    n = len(user)
    needs = needs or {}
    ptr, idx = [0], []
    for t in range(n):
        idx += needs.get(t, [])
        ptr.append(len(idx))
    i64 = lambda xs: np.asarray(xs, np.int64)  # noqa: E731
    ep = Episode(
        traj_id="hand/1",
        task_id="hand",
        source="test",
        model_family=family,
        family_id=0,
        success=True,
        n=n,
        base_tokens=base,
        user_tok=i64(user),
        asst_tok=i64(asst),
        has_out=np.asarray(vis, np.int64) > 0,
        est_tok=i64(vis),
        vis_cost=i64(vis),
        hid_cost=i64(hid),
        tool_id=np.zeros(n, np.int64),
        is_error=np.zeros(n, bool),
        need_ptr=i64(ptr),
        need_idx=i64(idx),
        need_kind=np.full(len(idx), NEED_KINDS.index("provenance"), np.int64),
        modified_at=np.full(n, NEVER, np.int64),
        superseded_at=np.full(n, NEVER, np.int64),
        user_turn=np.ones(n, np.int64),
        keys=[f"k{k}" if v else "" for k, v in enumerate(vis)],
        call_ptr=None if calls is None else i64([*calls, n]),
    )
    return ep
