import json

import numpy as np
import pytest

from dtoc_rl.cli import main

TINY = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--epochs", "2", "--dagger-rounds", "0"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "policy"
    assert main(["train", "-o", str(out), "--quiet", *TINY]) == 0
    return out


def test_train_writes_checkpoint_and_json_report(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["train", "-o", str(out), "--json", *TINY]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["checkpoint"] == str(out) and (out / "model.safetensors").is_file()
    # validation tasks: a tune half (early stopping, thresholds) and a held-out half (val_episodes)
    assert rep["train_episodes"] + rep["tune_episodes"] + rep["val_episodes"] == rep["episodes"]


def test_training_with_no_run_left_to_choose_thresholds_on_says_so(tmp_path, capsys):
    from dtoc_rl.data.paths import bundled_raw

    one = next(
        (bundled_raw() / "mini-swe-agent_gemini-3-pro_swebench-verified" / "trajs").glob("*.traj.json")
    )
    assert main(["ingest", str(one), "-o", str(tmp_path / "d"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["train", "--dataset", str(tmp_path / "d"), "-o", str(tmp_path / "c"), "--json", *TINY]) == 0
    said = capsys.readouterr()
    assert json.loads(said.out)["tune_episodes"] == 0  # the JSON stays whole; the warning is on stderr
    assert "no thresholds chosen: of 1 runs none was left to choose them on" in said.err
    assert main(["train", "-o", str(tmp_path / "c2"), "--quiet", *TINY]) == 0  # the sample has tune runs
    assert "no thresholds chosen" not in capsys.readouterr().err


def test_train_says_its_held_out_savings_as_evaluate_does_and_a_thin_tune_set(tmp_path, capsys):
    import re

    assert main(["train", "-o", str(tmp_path / "c"), *TINY]) == 0
    said = capsys.readouterr()
    assert re.search(r"held-out tasks: \$ saved vs\. no management [+-]\d+\.\d% \(mean over runs", said.out)
    # the sample's few tune runs are said once: the table abstains on them, or its choice is chance
    assert said.err.count(" tune run") == 1 and ("abstains everywhere" in said.err or "too few" in said.err)


def test_train_help_has_config_help_text(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--model-family" in out and "train only on this model family" in out and "--wandb" in out


def test_evaluate_help_lists_every_registered_rule_with_its_defaults(capsys):
    from dtoc_rl.policies.registry import BASELINES

    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # as wrapped
    assert all(name in out for name in BASELINES)
    assert "gemini_mask[:protect=50000,minimum=30000,min_tokens=175]" in out and "{baselines}" not in out


def test_train_bad_config_is_clear(tmp_path, capsys):
    assert main(["train", "-o", str(tmp_path / "x"), "--mode", "ppo", "--quiet"]) == 2
    assert "mode must be" in capsys.readouterr().err


def test_evaluate_json_rows_with_sweep_and_oracle(capsys, ckpt, tmp_path):
    args = ["evaluate", "-p", "none", "last_n:n=3|5", str(ckpt), "--json", "--bootstrap", "50",
            "--holdout-from", str(ckpt), "--csv", str(tmp_path / "m.csv"),
            "--plots", str(tmp_path)]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    overall = {r["policy"]: r for r in out["rows"] if r["group_by"] == "overall"}
    assert set(overall) == {"none", "last_n:n=3", "last_n:n=5", str(ckpt), "oracle"}
    assert out["environment"]["numpy"] == np.__version__  # figures compare only within one environment
    assert overall["none"]["savings"] == pytest.approx(0, abs=1e-9)
    assert overall["oracle"]["misses_per_100"] == 0 and overall["oracle"]["savings"] > 0
    for r in overall.values():
        assert r["savings_lo"] <= r["savings"] + 1e-9 <= r["savings_hi"] + 2e-9
    assert {r["group"] for r in out["rows"] if r["group_by"] == "split"} == {"train", "tune", "held-out"}
    assert (tmp_path / "m.csv").read_text().startswith("policy,")
    assert (tmp_path / "pareto.png").stat().st_size > 5000 and (tmp_path / "curves.png").is_file()


@pytest.mark.parametrize(
    "args,msg",
    [(["-p", "nope"], "unknown policy 'nope'"),
     (["-p", "none", "--model-family", "zzz"], "no usable trajectory"),
     (["-p", "last_n:n=0"], "positive integer")],
)  # fmt: skip
def test_evaluate_bad_input_is_clear(args, msg, capsys):
    assert main(["evaluate", "--quiet", *args]) == 2
    assert msg in capsys.readouterr().err


def test_evaluate_checkpoint_feature_mismatch_is_clear(ckpt, tmp_path, capsys):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(ckpt, bad)
    meta = json.loads((bad / "config.json").read_text())
    meta["global_features"] = meta["global_features"][:3]
    (bad / "config.json").write_text(json.dumps(meta))
    assert main(["evaluate", "-p", str(bad), "--quiet"]) == 2
    assert "different global features" in capsys.readouterr().err


def _damage_weights_random(d):
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 4)


def _damage_weights_truncated(d):
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])


def _damage_config(**change):
    def damage(d):
        meta = json.loads((d / "config.json").read_text())
        for k, v in change.items():
            if v is None:
                meta.pop(k)
            else:
                meta[k] = v if k != "config" else {**meta["config"], **v}
        (d / "config.json").write_text(json.dumps(meta))

    return damage


@pytest.mark.parametrize(
    "damage,msg",
    [
        (_damage_weights_random, "model.safetensors: not readable safetensors weights"),
        (_damage_weights_truncated, "model.safetensors: not readable safetensors weights"),
        (lambda d: (d / "config.json").write_text("[1, 2]"), "not a dtoc_rl learned-policy checkpoint"),
        (lambda d: (d / "config.json").write_bytes(b"\xff\xfe{"), "config.json: cannot be read"),
        (_damage_config(config=None), "config.json: no 'config' object"),
        (_damage_config(config={"n_heads": 3}), "config.json: unusable config"),
        (_damage_config(config={"d_model": "big"}), "config.json: unusable config"),
    ],
)
def test_evaluate_with_a_damaged_checkpoint_is_a_one_line_error(ckpt, tmp_path, capsys, damage, msg):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(ckpt, bad)
    damage(bad)
    assert main(["evaluate", "-p", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert msg in err and str(bad) in err and err.count("\n") == 1, err


def _foreign_table(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), path)


def _bad_rows(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {c: ["x"] for c in ("traj_id", "source", "model_raw", "model_family", "task_id")}
    pq.write_table(pa.table({**cols, "steps": [[1, 2]]}), path)  # steps that are not step records


@pytest.mark.parametrize(
    "make,msg",
    [
        ("folder", "not a DTOC-RL trajectory dataset (no column traj_id"),
        ("file", "not a DTOC-RL trajectory dataset"),
        ("not_parquet", "not a readable Parquet file"),
        ("bad_rows", "row 0 is not a trajectory of this schema"),
    ],
)
def test_evaluate_on_a_foreign_parquet_dataset_is_a_one_line_error(tmp_path, capsys, make, msg):
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "COMPLETE").write_text("1.2\n")
    shard = ds / "data-00000-of-00001.parquet"
    if make == "not_parquet":
        shard.write_bytes(b"PAR1 but not really" * 50)
    elif make == "bad_rows":
        _bad_rows(shard)
    else:
        _foreign_table(shard)
    target = shard if make == "file" else ds
    assert main(["evaluate", "--dataset", str(target), "-p", "none", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert msg in err and str(shard) in err and err.count("\n") == 1, err


def test_a_policy_that_raises_is_reported_and_the_rest_completes():
    from dtoc_rl.policies.baselines import NoManagement
    from dtoc_rl.policies.evaluate import aggregate, evaluate

    class Flaky(NoManagement):
        def reset(self, info=None):
            self.tid = (info or {}).get("traj_id")

        def act(self, obs, info=None):
            if self.tid and "django__django-11239" in self.tid:
                raise RuntimeError("boom")
            return super().act(obs, info)

    runs = evaluate(None, ["none"], policies={"flaky": Flaky()}, progress=False)
    bad = [r for r in runs if r.error]
    assert len(bad) == 1 and "django__django-11239" in bad[0].traj_id and "boom" in bad[0].error
    rows = aggregate(runs, by=["overall"], n_boot=20)
    flaky = next(r for r in rows if r["policy"] == "flaky")
    assert flaky["errors"] == 1 and flaky["n"] == 33


@pytest.mark.slow
def test_demo_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["demo", "--out", str(out), "--epochs", "2", "--thresholds", "0.5", "--workers", "1", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    metrics = json.loads(captured.out)  # --json: one document on stdout
    assert metrics["ingest"]["total"]["trajectories"] == 34
    policies = {r["policy"] for r in metrics["rows"]}
    assert {"oracle", "opencode_prune", "hide_big", "cache_clear"} <= policies
    ckpt = out / "policy"
    # the checkpoint as deployed (its stored thresholds) beside the sweep
    assert {f"learned:path={ckpt}", f"learned:path={ckpt},threshold=0.5"} <= policies
    table = json.loads((ckpt / "config.json").read_text())["meta"]["thresholds"]
    abstains = not any([table["default"], *table["family"].values(), *table["regime"].values()])
    assert ("abstains everywhere" in captured.err) == (abstains and not any(table["fallback"].values()))
    for f in ("metrics.json", "metrics.csv", "pareto.png", "curves.png"):
        assert (out / f).is_file(), f
