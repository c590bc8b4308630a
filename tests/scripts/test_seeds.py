"""scripts.seeds: the README's train and evaluate commands at several seeds, read as the issue does."""

import json

import pytest

from scripts import seeds

TINY = "--epochs 1 --dagger-rounds 0 --d-model 16 --n-heads 2 --n-layers 1"


def test_seeds_on_one_split_are_measured_on_the_same_tasks_and_summed_up(tmp_path, capsys):
    """With --split-seed every seed holds out the same tasks; the summary is the seeds' own figures;
    a second run measures the checkpoints again without training them, and one with other settings
    is refused rather than overwritten."""
    out = tmp_path / "s"

    def argv(*ids, train=TINY):
        return ["--out", str(out), "--seeds", *ids, "--split-seed", "0", f"--train={train}",
                "--thresholds", "0.1", "--json"]  # fmt: skip

    assert seeds.main(argv("0", "1")) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads((out / "seeds.json").read_text())["summary"] == result["summary"]
    assert not list(out.glob("*.partial"))
    a, b = result["seeds"]
    assert a["trained"] and b["trained"] and a["checkpoint"].endswith("seed-0-split-0")
    assert a["groups"]["all"]["n"] == b["groups"]["all"]["n"] > 0
    assert a["groups"]["all"]["oracle_savings"] == b["groups"]["all"]["oracle_savings"]
    assert 0.0 <= a["groups"]["all"]["rule_share"] <= 1.05  # the need reference, measured beside it
    shares = [s["groups"]["all"]["best_share"] or 0.0 for s in (a, b)]
    assert result["summary"]["all"]["mean_share"] == pytest.approx(sum(shares) / 2)
    assert result["summary"]["all"]["seeds"] == 2
    held = [
        json.loads((out / f"seed-{s}-split-0" / "config.json").read_text())["meta"]["val_tasks"]
        for s in (0, 1)
    ]
    assert held[0] == held[1]

    model = out / "seed-0-split-0" / "model.safetensors"
    before = model.stat().st_mtime_ns
    first = tmp_path / "first.json"
    first.write_text((out / "seeds.json").read_text())
    assert seeds.main([*argv("0"), "--against", str(first)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["against"]["groups"]["all"]["diff"] == [0.0]  # the same checkpoint against itself
    assert model.stat().st_mtime_ns == before and not again["seeds"][0]["trained"]
    assert again["seeds"][0]["groups"] == a["groups"]

    assert seeds.main(argv("0", train=TINY.replace("--epochs 1", "--epochs 2"))) == 2
    assert "was trained with epochs=1, not 2" in capsys.readouterr().err
    assert model.stat().st_mtime_ns == before
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ValueError, match="was trained on objects, not /"):  # the sample, not that folder
        seeds.reusable(out / "seed-0-split-0", {}, str(elsewhere))
    from dtoc_rl.data.paths import bundled_dataset

    # the same data by another name (its folder given, moved, linked): the very tasks, so reused
    assert seeds.reusable(out / "seed-0-split-0", {}, str(bundled_dataset()))
    # a checkpoint saved before a setting existed holds what it was trained with, not "none"
    cfg_file = out / "seed-0-split-0" / "config.json"
    whole = json.loads(cfg_file.read_text())
    del whole["config"]["cold_scale"]
    cfg_file.write_text(json.dumps(whole))
    assert seeds.reusable(out / "seed-0-split-0", {"cold_scale": 1.0}, str(bundled_dataset()))
    with pytest.raises(ValueError, match=r"was trained with cold_scale=1\.0, not 3\.0"):
        seeds.reusable(out / "seed-0-split-0", {"cold_scale": 3.0}, str(bundled_dataset()))
    assert (out / "seed-0-split-0.train.log").exists() and (out / "seed-0-split-0.evaluate.log").exists()


def _group(share, *, failed=False, table=0.05, reaches=False):
    return {"n": 10, "oracle_savings": 0.2, "best_share": share,
            "best_policy": "learned:path=c,threshold=0.1", "best_misses_per_100": 0.5, "reaches": reaches,
            "oracle_failed": failed, "table_savings": table, "table_misses_per_100": 0.8}  # fmt: skip


def test_a_seed_whose_oracle_failed_is_left_out_of_the_group_not_counted_as_nothing():
    runs = [{"seed": 0, "groups": {"all": _group(0.5), "long": _group(0.7)}},
            {"seed": 1, "groups": {"all": _group(None),
                                   "long": _group(None, failed=True, table=float("nan"))}},
            {"seed": 2, "groups": {"all": _group(0.4)}}]  # fmt: skip
    sm = seeds.summary(runs, target=0.6, budget=1.0)
    assert sm["all"]["seeds"] == 3 and sm["all"]["mean_share"] == pytest.approx(0.3)  # none within: 0
    assert sm["long"]["seeds"] == 1 and sm["long"]["mean_share"] == pytest.approx(0.7)
    assert sm["long"]["reach"] == 1 and sm["all"]["reach"] == 0
    text = seeds.tables({"seeds": runs, "summary": sm, "args": {"target": 0.6}})
    assert "oracle failed" in text and "none within budget" in text and "nan" not in text
    assert "knowing need" not in text and sm["all"]["mean_rule_share"] is None  # a file from before it
    runs[0]["groups"]["all"]["rule_share"], runs[2]["groups"]["all"]["rule_share"] = 0.8, 0.7
    sm = seeds.summary(runs, target=0.6, budget=1.0)
    assert sm["all"]["mean_rule_share"] == pytest.approx(0.75)
    text = seeds.tables({"seeds": runs, "summary": sm, "args": {"target": 0.6}})
    assert "| `oracle:schedule=rule` (knowing need) | 75.0% | — |" in text
    assert "| judged on | 3 seeds | 1 seed |" in text
    # a seed whose oracle saved next to nothing there has no share to count (done_when: reaches None)
    runs[2]["groups"]["all"] = _group(None, reaches=None)
    sm = seeds.summary(runs, target=0.6, budget=1.0)
    assert sm["all"]["seeds"] == 2 and sm["all"]["mean_share"] == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--train=--split-seed 3"], "split_seed is set by this script"),
        (["--train=--seed 3"], "seed is set by this script (--seeds, --split-seed)"),
        (["--train=--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--dataset", "/no/such/folder"], "no such dataset folder"),
    ],
)
def test_bad_settings_are_one_line_errors_before_any_training(tmp_path, capsys, argv, message):
    assert seeds.main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--seeds", "1", "1"], "each seed once"), (["--target", "0"], "--target must be in"),
     (["--thresholds", "2"], "--thresholds must be in"), (["--jobs", "0"], "--jobs")],
)  # fmt: skip
def test_bad_arguments_are_refused_by_the_parser(capsys, argv, message):
    with pytest.raises(SystemExit):
        seeds.parse(argv)
    assert message in capsys.readouterr().err


def test_paired_differences_need_the_same_held_out_runs():
    here = {"seeds": [{"seed": s, "groups": {"all": _group(x)}} for s, x in ((0, 0.5), (1, 0.6), (2, None))]}
    there = {"seeds": [{"seed": s, "groups": {"all": _group(x)}} for s, x in ((0, 0.4), (1, 0.4), (2, 0.1))]}
    g = seeds.paired(here, there)["all"]
    assert g["seeds"] == [0, 1, 2] and g["diff"] == pytest.approx([0.1, 0.2, -0.1])
    assert g["mean_diff"] == pytest.approx(0.2 / 3)
    assert g["standard_error"] == pytest.approx(0.152753 / 3**0.5, rel=1e-4)
    there["seeds"][1]["groups"]["all"]["n"] = 11
    with pytest.raises(ValueError, match="seed 1 holds out other runs there"):
        seeds.paired(here, there)
    with pytest.raises(ValueError, match="no seed of it is among these seeds"):
        seeds.paired(here, {"seeds": [{"seed": 9, "groups": {}}]})


def test_a_bad_against_file_is_refused_before_any_training(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    assert seeds.main(["--against", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "--against" in capsys.readouterr().err and not (tmp_path / "o").exists()
