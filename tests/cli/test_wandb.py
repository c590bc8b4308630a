"""wandb runs from train / evaluate, read back from the offline run directory (no network)."""

import struct
from pathlib import Path

import pytest

from dtoc_rl.cli import main

pytest.importorskip("wandb")
TINY = [
    "--d-model",
    "16",
    "--n-heads",
    "2",
    "--n-layers",
    "0",
    "--epochs",
    "1",
    "--dagger-rounds",
    "0",
    "--source",
    "tau-bench",
]


def _records(run_dir: Path):
    """The protobuf records of an offline run's .wandb file (a LevelDB-style log of 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, buf, out, block = 7, b"", [], 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def _runs(root: Path) -> list[dict]:
    import wandb

    wandb.teardown()  # the run files are written by wandb's service process: let it flush and exit
    runs = []
    for d in sorted((root / "wandb").glob("offline-run-*")):
        info: dict = {"artifacts": {}, "history": set(), "exit": None}
        for r in _records(d):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                info.update(name=r.run.display_name, tags=list(r.run.tags), group=r.run.run_group,
                            job_type=r.run.job_type)  # fmt: skip
            elif kind == "artifact":
                info["artifacts"][r.artifact.name] = (
                    r.artifact.type,
                    {m.path for m in r.artifact.manifest.contents},
                )
            elif kind == "history":
                info["history"] |= {"/".join(i.nested_key) or i.key for i in r.history.item}
            elif kind == "exit":
                info["exit"] = r.exit.exit_code
        runs.append(info)
    return runs


@pytest.fixture(autouse=True)
def fresh_wandb():
    """wandb reads its settings (WANDB_DIR, ...) once per process: start each test from scratch."""
    import wandb

    wandb.teardown()
    yield
    wandb.teardown()


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


@pytest.mark.slow  # trains a (tiny) policy
def test_train_logs_the_checkpoint_as_an_artifact_with_name_tags_group(offline):
    out = offline / "ckpt"
    argv = ["train", "-o", str(out), "--quiet", *TINY, "--wandb", "--wandb-name", "tiny-run",
            "--wandb-tags", "paper", "seed0", "--wandb-group", "sweep-a"]  # fmt: skip
    assert main(argv) == 0
    (run,) = _runs(offline)
    assert (run["name"], run["tags"], run["group"], run["job_type"]) == (
        "tiny-run",
        ["paper", "seed0"],
        "sweep-a",
        "train",
    )
    assert run["artifacts"]["policy"] == ("model", {"model.safetensors", "config.json"})
    assert "train/loss" in run["history"] or any(k.startswith("train") for k in run["history"])
    assert run["exit"] == 0


def test_a_failed_training_closes_its_run_with_a_non_zero_exit_code(offline, capsys):
    argv = ["train", "-o", str(offline / "x"), "--quiet", *TINY, "--wandb", "--model-family", "no-such"]
    assert main(argv) == 2
    assert "no-such" in capsys.readouterr().err
    (run,) = _runs(offline)
    assert run["exit"] not in (None, 0) and not run["artifacts"]


def test_the_mode_is_wandbs_own_choice_not_forced_offline(tmp_path, monkeypatch, capsys):
    # No key and no login: wandb refuses an online run; the toolkit says so instead of going offline.
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no wandb settings
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    assert main(["train", "-o", str(tmp_path / "x"), "--quiet", *TINY, "--wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert "wandb" in err and "wandb login" in err and len(err.splitlines()) == 1
    assert not list(tmp_path.glob("wandb/offline-run-*"))


def test_evaluate_logs_tables_plots_and_files(offline):
    argv = ["evaluate", "-p", "none", "last_n:n=3", "--quiet", "--bootstrap", "20", "--source", "tau-bench",
            "--plots", str(offline / "p"), "--csv", str(offline / "m.csv"),
            "--wandb", "--wandb-tags", "eval"]  # fmt: skip
    assert main(argv) == 0
    (run,) = _runs(offline)
    assert run["job_type"] == "evaluate" and run["tags"] == ["eval"] and run["exit"] == 0
    assert {"evaluation/metrics", "plots/pareto", "plots/curves"} <= {
        k.split("/_")[0] for k in run["history"]
    } | {"/".join(k.split("/")[:2]) for k in run["history"]}
    kind, files = run["artifacts"]["evaluation"]
    assert kind == "evaluation" and {"pareto.png", "curves.png", "m.csv"} <= files


@pytest.mark.slow  # the whole demo: ingest, train, evaluate
def test_demo_logs_one_run_with_checkpoint_tables_and_plots(offline, capsys):
    out = offline / "demo"
    argv = ["demo", "--out", str(out), "--epochs", "1", "--thresholds", "0.5", "--workers", "1", "--json",
            "--plot-format", "pdf", "--wandb", "--wandb-group", "demo-test"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert (out / "pareto.pdf").read_bytes().startswith(b"%PDF") and not (out / "pareto.png").exists()
    (run,) = _runs(offline)
    assert (run["job_type"], run["group"], run["exit"]) == ("demo", "demo-test", 0)
    assert run["artifacts"]["policy"] == ("model", {"model.safetensors", "config.json"})
    kind, files = run["artifacts"]["evaluation"]
    assert kind == "evaluation" and {"pareto.pdf", "curves.pdf", "metrics.json", "metrics.csv"} <= files
    assert any(k.startswith("evaluation/metrics") for k in run["history"])


@pytest.mark.parametrize("command", [["train", "-o", "x"], ["evaluate", "-p", "none"], ["demo"]])
def test_run_options_without_wandb_are_an_error_not_dropped(command, capsys):
    assert main([*command, "--wandb-tags", "paper", "--wandb-group", "g"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--wandb-tags, --wandb-group only apply to a wandb run: add --wandb")
    assert len(err.splitlines()) == 1
