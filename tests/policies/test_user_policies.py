"""A user's own policy, by spec (``module:Class``) or as an object, everywhere a policy is taken."""

import inspect
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from dtoc_rl.engine.features import DEFAULT_MAX_ITEMS
from dtoc_rl.envs import ReplayEnv
from dtoc_rl.policies.base import Policy
from dtoc_rl.policies.evaluate import aggregate, evaluate, token_curves
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.registry import PolicySpecError, expand_specs, make_policy

USER_MODULE = '''
import numpy as np
from dtoc_rl.policies.base import Policy, empty_action


class HideOld(Policy):
    """Hides every stored output but the newest ``keep``."""

    name = "hide_old"

    def __init__(self, keep=2):
        self.keep = keep

    def act(self, obs, info=None):
        a = empty_action(len(obs["item_mask"]))
        stored = np.flatnonzero(obs["item_mask"])
        old = stored[: max(0, len(stored) - self.keep)]
        a["disable"][old] = obs["disable_mask"][old]
        return a

    def config(self):
        return {"keep": self.keep}


def make(keep=1):
    return HideOld(keep=keep)


class Broken(Policy):
    name = "broken"

    def act(self, obs, info=None):
        raise RuntimeError("always broken\\nsecond line")


Boom = Broken  # a name rich would read as an emoji code in "module:Boom: ..."


class NotAPolicy:
    pass


class NeedsArg(Policy):
    def __init__(self, must):
        self.must = must

    def act(self, obs, info=None):
        return {}
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    name = f"my_policies_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_make_policy_builds_a_class_with_parameters(user_module):
    pol = make_policy(f"{user_module}:HideOld")
    assert isinstance(pol, Policy) and pol.keep == 2
    assert make_policy(f"{user_module}:HideOld:keep=5").keep == 5
    assert make_policy(f"{user_module}:make").keep == 1  # a factory function
    assert make_policy(f"{user_module}:make:keep=3").keep == 3


def test_make_policy_returns_a_policy_object_as_it_is(user_module):
    pol = make_policy(f"{user_module}:HideOld")
    assert make_policy(pol) is pol
    with pytest.raises(PolicySpecError, match="got int"):
        make_policy(3)


def test_user_specs_sweep_like_built_in_ones(user_module):
    specs = expand_specs([f"{user_module}:HideOld:keep=1|4"])
    assert specs == [f"{user_module}:HideOld:keep=1", f"{user_module}:HideOld:keep=4"]
    assert [make_policy(s).keep for s in specs] == [1, 4]


@pytest.mark.parametrize(
    "attr, match",
    [
        ("Missing", "has no attribute 'Missing'"),
        ("NotAPolicy", "made a NotAPolicy: a policy needs an act\\(obs, info\\) method"),
        ("NeedsArg", "NeedsArg\\(...\\) failed: TypeError"),
        ("HideOld:nope=1", "failed: TypeError"),
    ],
)
def test_bad_user_policies_are_one_line_errors(user_module, attr, match):
    with pytest.raises(PolicySpecError, match=match) as e:
        make_policy(f"{user_module}:{attr}")
    assert "\n" not in str(e.value)


def test_a_missing_module_is_named():
    with pytest.raises(PolicySpecError, match="cannot import 'no_such_module_xyz'"):
        make_policy("no_such_module_xyz:Policy")
    # a built-in name with a bad parameter is still reported as such, not imported
    with pytest.raises(PolicySpecError, match="not key=value"):
        make_policy("last_n:foo")


def test_evaluate_takes_policy_objects_and_user_specs(user_module):
    obj = make_policy(f"{user_module}:HideOld:keep=1")
    runs = evaluate(None, [obj, f"{user_module}:HideOld:keep=3", "none"], source="mini-swe-agent",
                    progress=False)  # fmt: skip
    labels = {r.policy for r in runs}
    assert labels == {"hide_old(keep=1)", f"{user_module}:HideOld:keep=3", "none", "oracle"}
    assert not [r for r in runs if r.error]
    by = {r["policy"]: r for r in aggregate(runs, by=["overall"], n_boot=10)}
    # the user's policies really ran: they hid outputs (and differently), no management did nothing
    one, three = by["hide_old(keep=1)"], by[f"{user_module}:HideOld:keep=3"]
    assert one["n"] == three["n"] == by["none"]["n"] > 0
    assert one["mgmt_calls"] > 0 and three["mgmt_calls"] > 0 and one["savings"] != three["savings"]
    assert by["none"]["mgmt_calls"] == 0 and by["none"]["token_savings"] == 0
    curves = token_curves(None, [obj], [runs[0].traj_id])
    assert set(curves[runs[0].traj_id]) == {"hide_old(keep=1)", "oracle"}


def test_a_policy_whose_every_run_fails_is_reported_not_dropped(user_module):
    runs = evaluate(None, [f"{user_module}:Broken", "none"], source="mini-swe-agent", progress=False)
    rows = aggregate(runs, by=["overall", "model_family"], n_boot=10)
    broken = [r for r in rows if r["policy"] == f"{user_module}:Broken"]
    n_traj = len({r.traj_id for r in runs})
    overall = next(r for r in broken if r["group_by"] == "overall")
    assert overall["n"] == 0 and overall["errors"] == n_traj
    assert "RuntimeError: always broken" in overall["first_error"]
    assert math.isnan(overall["savings"])
    assert sum(r["errors"] for r in broken if r["group_by"] == "model_family") == n_traj
    none = next(r for r in rows if r["policy"] == "none" and r["group_by"] == "overall")
    assert none["n"] == n_traj and none["errors"] == 0 and none["first_error"] == ""


def test_a_policy_name_is_printed_as_written(user_module, capsys):
    from dtoc_rl.cli import main

    assert (
        main(["evaluate", "-p", f"{user_module}:Boom", "--source", "mini-swe-agent", "--bootstrap", "10"])
        == 1
    )
    out = " ".join(capsys.readouterr().out.split())
    assert f"{user_module}:Boom: all" in out and "\N{COLLISION SYMBOL}" not in out


def test_default_slots_are_one_constant():
    assert DEFAULT_MAX_ITEMS == inspect.signature(ReplayEnv).parameters["max_items"].default
    assert DEFAULT_MAX_ITEMS == inspect.signature(evaluate).parameters["max_items"].default
    assert DEFAULT_MAX_ITEMS == inspect.signature(token_curves).parameters["max_items"].default
    assert DEFAULT_MAX_ITEMS == LearnedPolicyConfig().max_items


def test_serve_loads_a_user_policy(user_module):
    from dtoc_rl.cli.serve import _load
    from dtoc_rl.serve.service import DecisionService

    pol = _load(f"{user_module}:HideOld:keep=1", "policy")
    items = [{"key": f"t{i:04d}", "tokens": 100, "visible": True, "tool": "bash"} for i in range(3)]
    out = DecisionService(pol).decide({"model_family": "gpt-4o", "items": items})
    assert out["disable"] == ["t0000", "t0001"] and out["enable"] == []


@pytest.mark.skipif(shutil.which("dtoc-rl") is None, reason="the dtoc-rl console script is not installed")
def test_cli_evaluate_imports_a_policy_file_from_the_current_folder(tmp_path):
    # the console script's sys.path lacks the current folder; the spec still finds a file there
    (tmp_path / "cwd_policies.py").write_text(USER_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = ["dtoc-rl", "evaluate", "-p", "cwd_policies:HideOld:keep=1", "cwd_policies:Broken",
           "--source", "mini-swe-agent", "--bootstrap", "10", "--json"]  # fmt: skip
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # every run of one policy failed: the others' figures are all there, and the exit status says so
    assert p.returncode == 1, p.stderr
    said = "dtoc-rl: error: every run of cwd_policies:Broken failed (the errors are above, or in failed_runs)"
    assert p.stderr.strip().splitlines()[-1] == said
    out = json.loads(p.stdout)
    overall = {r["policy"]: r for r in out["rows"] if r["group_by"] == "overall"}
    assert overall["cwd_policies:HideOld:keep=1"]["n"] > 0
    assert overall["cwd_policies:Broken"]["n"] == 0 and overall["cwd_policies:Broken"]["errors"] > 0
    assert {f["policy"] for f in out["failed_runs"]} == {"cwd_policies:Broken"}
    ids = [f["traj_id"] for f in out["failed_runs"]]
    table = subprocess.run(cmd[:-1], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "all 12 runs failed" in table.stdout
    assert "cwd_policies:Broken: all 12 runs failed in all; first error: RuntimeError: always broken" in (
        " ".join(table.stdout.split())
    )
    assert "second line" not in table.stdout + table.stderr  # errors are one line
    # one line for the error all 12 runs stopped on, not one per run
    assert [x for x in table.stderr.splitlines() if x.startswith("failed:")] == [
        f"failed: cwd_policies:Broken on 12 runs ({', '.join(ids[:2])} and 10 more): "
        "RuntimeError: always broken"
    ]


def test_an_object_with_act_only_is_a_policy_for_evaluate_as_for_the_orchestrator():
    from dtoc_rl.policies.base import empty_action
    from dtoc_rl.policies.evaluate import evaluate
    from dtoc_rl.policies.registry import PolicySpecError, make_policy

    class ActOnly:  # no reset: make_policy and the Orchestrator take it, so evaluate does too
        def act(self, obs, info=None):
            return empty_action(len(obs["item_mask"]))

    runs = evaluate(None, [ActOnly()], source="tau-bench", progress=False)
    assert runs and not any(r.error for r in runs)
    with pytest.raises(PolicySpecError, match="ActOnly is a class: give an instance"):
        make_policy(ActOnly)
