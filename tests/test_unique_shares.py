"""What of an output no newer output and none of the agent's own words hold (``unique_text`` and
``unique_names``): the labeller's live shares, the offline events a replay shows, and the claim that
makes them worth a policy's input (a share of zero in both: no copy is attributed to it any more)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.engine.decide_request import DecideError, decode, parse, to_request
from dtoc_rl.engine.features import ITEM_FEATURES, ItemColumns
from dtoc_rl.labels import NeedLabeller, label_trajectory, unique_events
from dtoc_rl.labels.labeller import _key_map, _turn_groups

CODE = """def compute_total_price(items, discount_rate):
    subtotal = sum(item.unit_price * item.quantity for item in items)
    return subtotal * (1 - discount_rate)
"""


def make(steps: list[dict]) -> Trajectory:
    return Trajectory(
        traj_id="test/u", source="test", model_raw="m", model_family="other", task_id="u",
        task_text="Fix the bug.", system_prompt="You are an agent.",
        steps=[Step(index=i, turn=i, **kw) for i, kw in enumerate(steps)],
    )  # fmt: skip


def bash(cmd: str, output: str, text: str = "") -> dict:
    return {"tool_name": "bash", "tool_args": cmd, "output": output, "assistant_text": text}


def final(traj: Trajectory) -> dict[int, tuple[float, float]]:
    """Each output's shares after the whole trajectory (its latest event)."""
    out: dict[int, tuple[float, float]] = {}
    for _, k, w, a in unique_events(traj):
        out[k] = (w, a)
    return out


def test_a_newer_output_holding_the_same_text_takes_it_over():
    t = make([bash("cat src/calc.py", CODE), bash("ls", "a.txt b.txt"), bash("cat src/calc.py", CODE)])
    shares = final(t)
    assert shares[0] == (0.0, 0.0)  # all of it is in step 2's output now
    assert shares[2] == (1.0, 1.0) and shares[1][0] == 1.0


def test_what_the_agent_quotes_itself_no_output_holds_any_more():
    t = make([
        bash("cat src/calc.py", CODE),
        bash("grep -n subtotal src/calc.py", "2:    subtotal = ...",
             text="The line is `subtotal = sum(item.unit_price * item.quantity for item in items)`."),
    ])  # fmt: skip
    w, a = final(t)[0]
    assert 0.0 < w < 1.0 and a < 1.0  # the quoted line (and its names) left it; the rest stays its own


def test_shares_only_shrink_and_start_with_the_outputs_own_step():
    t = make([bash("cat src/calc.py", CODE), bash("echo", "subtotal = sum(item.unit_price")])
    ev = unique_events(t)
    assert [(at, k) for at, k, *_ in ev][:1] == [(0, 0)]
    by_output: dict[int, list[tuple[float, float]]] = {}
    for _, k, w, a in ev:
        by_output.setdefault(k, []).append((w, a))
    for seq in by_output.values():
        assert all(x[0] >= y[0] and x[1] >= y[1] for x, y in zip(seq, seq[1:]))
    assert by_output[0][-1][0] < 1.0


def test_offline_events_equal_the_live_labeller_on_the_sample(data_dir):
    trajs = load_trajectories(data_dir / "sample")
    assert len(trajs) > 20
    for tr in trajs:
        tr = copy.deepcopy(tr)
        lab = NeedLabeller(tr.task_text, tr.system_prompt, keys=_key_map(tr, None), track_unique=True)
        live = []
        for g in _turn_groups(tr.steps):
            lab.label_turn(g)
            live.extend((g[-1].index, k, *lab.unique(k)) for k in sorted(lab.take_unique_changes()))
        assert live == unique_events(tr), tr.traj_id


def test_an_output_with_nothing_of_its_own_is_never_a_copys_source(data_dir):
    """The reason for the input: copies are attributed to the newest output holding them and never to
    the agent's own words, so once both shares are zero no later step copies from it."""
    zero_at: dict[tuple[str, int], int] = {}
    for tr in load_trajectories(data_dir / "sample"):
        label_trajectory(tr)
        for at, k, w, a in unique_events(tr):
            if w == 0.0 and a == 0.0:
                zero_at.setdefault((tr.traj_id, int(k)), int(at))
        for s in tr.steps:
            for n in s.needs:
                at = zero_at.get((tr.traj_id, n.step))
                if n.kind == "provenance" and at is not None:
                    assert s.index <= at, (tr.traj_id, n)
    assert len(zero_at) > 20


def test_a_turn_without_tracking_keeps_nothing():
    lab = NeedLabeller("task")
    lab.label_turn([Step(index=0, turn=0, **bash("cat a.py", CODE))])
    assert lab.unique(0) == (1.0, 1.0) and lab.take_unique_changes() == set()


def test_columns_and_decide_requests_carry_the_shares():
    cols = ItemColumns()
    row = cols.append(100, 0, call=0, users_at=0)
    assert cols.get(row, "unique_text") == 1.0 and cols.get(row, "unique_names") == 1.0
    cols.set_share(row, "unique_text", 0.25)
    assert cols.state(row, True, now=1, users=0).unique_text == 0.25
    with pytest.raises(KeyError, match="not a share"):
        cols.set_share(row, "rereads", 0.5)
    req = to_request({"items": [{"key": "a", "tokens": 900, "unique_text": 0.2}, {"key": "b", "tokens": 5}]})
    states = parse(req, max_items=4, max_request_items=10)["states"]
    assert [(s.unique_text, s.unique_names) for s in states] == [(0.2, 1.0), (1.0, 1.0)]
    i = ITEM_FEATURES.index("unique_text")
    assert np.isclose(states[0].row()[i], 0.2)
    with pytest.raises(DecideError) as e:
        decode(b'{"items": [{"key": "a", "tokens": 1, "unique_names": 1.5}]}')
    assert e.value.field == "items[0].unique_names"


def test_a_remote_policy_sends_the_shares_it_sees():
    from dtoc_rl.engine.features import ItemState, build_observation
    from dtoc_rl.serve.service import RemotePolicy

    obs = build_observation(
        [ItemState(est_tokens=500, age=3, visible=True, unique_text=0.0, unique_names=0.5),
         ItemState(est_tokens=90, age=1, visible=True)],
        4, active_tokens=600, step=4,
    )  # fmt: skip
    body, _ = RemotePolicy("http://127.0.0.1:1").request(obs, {"keys": ["a", "b"]})
    assert [(it["unique_text"], it["unique_names"]) for it in body["items"]] == [(0.0, 0.5), (1.0, 1.0)]
    states = parse(to_request(body), max_items=4, max_request_items=10)["states"]
    assert np.allclose([s.row() for s in states], obs["items"][:2])


def test_an_episodes_unique_shares_are_read_as_kept_or_computed_at_first_use():
    """Most of compiling an episode is this pass: the labeller keeps its result with the run, and an
    episode of a run without it computes it when a replay first needs it (a worker of evaluate()'s
    pool then pays it only for its own parts)."""
    import dataclasses

    import numpy as np

    from dtoc_rl.data.dataset import load_trajectories
    from dtoc_rl.data.paths import bundled_dataset
    from dtoc_rl.labels import unique_events
    from dtoc_rl.sim.episode import compile_episode

    tr = next(t for t in load_trajectories(bundled_dataset()) if len(t.steps) > 5)
    want = np.asarray(unique_events(tr), np.float64).reshape(-1, 4)
    kept = compile_episode(tr)
    assert kept.unique is not None and np.array_equal(kept.unique, want)  # read, not computed
    bare = dataclasses.replace(tr, unique_events=None, unique_digest=None)
    ep = compile_episode(bare)
    assert ep.unique is None  # not computed yet
    assert np.array_equal(ep.unique_shares(), want) and ep.unique is ep.unique_shares()


def test_the_bundled_samples_kept_shares_are_the_rules(data_dir):
    # a change of unique_events' rule fails here until UNIQUE_RULE is changed with it (the sample's
    # kept shares are then ignored, their digests no longer match) and the sample rebuilt
    from dtoc_rl.labels import unique_digest, unique_events

    trajs = load_trajectories(data_dir / "sample")
    kept = [t for t in trajs if t.unique_events is not None]
    assert len(kept) == len(trajs)
    for t in kept:
        assert t.unique_digest == unique_digest(t)
        assert [tuple(e) for e in t.unique_events] == [tuple(map(float, e)) for e in unique_events(t)]


def test_labelling_keeps_the_shares_only_at_the_rules_settings(data_dir):
    from dtoc_rl.labels import unique_digest, unique_events

    tr = next(t for t in load_trajectories(data_dir / "sample") if len(t.steps) > 5)
    label_trajectory(tr, min_span=30)  # a setting of the needs alone: the shares are the same
    assert tr.unique_events == [list(e) for e in unique_events(tr)] and tr.unique_digest == unique_digest(tr)
    for other in ({"window": 4}, {"min_atom": 8}, {"include_reasoning": True}, {"exclude_agent_text": False}):
        label_trajectory(tr, **other)
        assert tr.unique_events is None and tr.unique_digest is None, other


def test_a_run_changed_after_labelling_has_its_shares_computed_again(data_dir):
    import numpy as np

    from dtoc_rl.labels import unique_events
    from dtoc_rl.sim.episode import compile_episode

    tr = next(
        t for t in load_trajectories(data_dir / "sample") if sum(s.output is not None for s in t.steps) > 2
    )
    k = next(s.index for s in tr.steps if s.output)
    tr.steps[k].output = (
        tr.steps[k].output + "\nsrc/brand_new_module.py"
    )  # an output edited: kept shares stale
    ep = compile_episode(tr)
    assert ep.unique is None
    assert np.array_equal(ep.unique_shares(), np.asarray(unique_events(tr), np.float64).reshape(-1, 4))
    tr2 = next(t for t in load_trajectories(data_dir / "sample") if len(t.steps) > 5)
    tr2.steps = tr2.steps[:-1]  # a run cut after labelling
    assert compile_episode(tr2).unique is None


def test_the_digest_is_the_same_in_another_process(data_dir):
    import os
    import subprocess
    import sys

    from dtoc_rl.labels import unique_digest

    tr = load_trajectories(data_dir / "sample")[0]
    code = (
        "from dtoc_rl.data.dataset import load_trajectories; from dtoc_rl.labels import unique_digest; "
        f"print(unique_digest(load_trajectories({str(data_dir / 'sample')!r})[0]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )  # fmt: skip
    assert int(out.stdout) == unique_digest(tr) == tr.unique_digest


def test_a_new_rule_makes_kept_shares_stale(data_dir, monkeypatch):
    from dtoc_rl.labels import labeller
    from dtoc_rl.sim.episode import compile_episode

    tr = next(t for t in load_trajectories(data_dir / "sample") if len(t.steps) > 5)
    assert compile_episode(tr).unique is not None
    monkeypatch.setattr(labeller, "UNIQUE_RULE", labeller.UNIQUE_RULE + " changed")
    assert labeller.unique_digest(tr) != tr.unique_digest and compile_episode(tr).unique is None
