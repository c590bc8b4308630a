"""`dtoc-rl ingest` writes a dataset card (README.md) next to the shards."""

import json
import shutil

from dtoc_rl.cli import main as cli
from dtoc_rl.data.dataset import load_trajectories, write_dataset
from dtoc_rl.data.paths import bundled_dataset, bundled_raw
from dtoc_rl.data.schema import SCHEMA_VERSION


def test_ingest_writes_a_card_with_schema_sources_licences_counts_and_command(tmp_path, capsys):
    raw = tmp_path / "logs"
    shutil.copytree(bundled_raw(), raw)
    # one source without a licence file: the card must say it is unknown, not borrow a neighbour's
    (raw / "tau-bench_gpt-4o_airline" / "LICENSE").unlink()
    out = tmp_path / "ds"
    assert cli(["ingest", str(raw), "-o", str(out), "--quiet", "--workers", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    card = (out / "README.md").read_text()
    assert f"schema version {SCHEMA_VERSION}" in card
    assert f"ingest {raw} -o {out}" in card  # the command that made it
    rows = {ln.split("|")[1].strip(): ln for ln in card.splitlines() if ln.startswith("| ")}
    assert "MIT (logs/mini-swe-agent_gemini-3-pro_swebench-verified/LICENSE.md)" in rows["mini-swe-agent"]
    assert "MIT (logs/openhands-sdk_gpt-4o_openagentsafety/LICENSE)" in rows["openhands-sdk"]
    assert rows["tau-bench"].rstrip().endswith("| unknown |")
    total = summary["total"]
    assert f"| **total** | | **{total['trajectories']}** | **{total['steps']}** |" in card
    assert "| mini-swe-agent | gemini-3-pro | 12 | 273 | 6 | 6 | 0 |" in card
    assert "- `steps`: one entry per model call, with `index`" in card
    assert len(load_trajectories(out)) == total["trajectories"]  # the card is not mistaken for data


def test_write_dataset_without_inputs_still_counts_and_says_licences_are_unknown(tmp_path):
    trajs = load_trajectories(bundled_dataset())[:3]
    out = write_dataset(trajs, tmp_path / "d", command="python make.py")
    card = (out / "README.md").read_text()
    assert "Made with: `python make.py`" in card
    assert f"| **total** | | **3** | **{sum(len(t.steps) for t in trajs)}** |" in card
    assert "unknown (inputs not given)" in card


def test_a_dataset_with_a_shard_lost_added_or_copied_in_is_refused(tmp_path):
    import shutil

    import pytest

    from dtoc_rl.data.dataset import DatasetError, load_trajectories, write_dataset

    trajs = load_trajectories(bundled_dataset())
    whole = write_dataset(trajs, tmp_path / "whole", shard_bytes=200_000)
    shards = sorted(whole.glob("*.parquet"))
    assert len(shards) >= 3 and len(load_trajectories(whole)) == len(trajs)

    def variant(name, change):
        d = tmp_path / name
        shutil.copytree(whole, d)
        change(d)
        with pytest.raises(DatasetError) as e:
            load_trajectories(d)
        return str(e.value)

    assert "not one whole dataset" in variant("lost", lambda d: (d / shards[1].name).unlink())
    assert "is not one of its shards" in variant(
        "copy", lambda d: shutil.copy(d / shards[0].name, d / "data-copy.parquet")
    )
    other = write_dataset(trajs[:3], tmp_path / "other")
    said = variant("mixed", lambda d: shutil.copy(next(other.glob("*.parquet")), d / shards[0].name))
    assert f"summary.json says {len(trajs)}" in said


def test_inputs_given_as_a_generator_still_name_their_licences(tmp_path):
    from dtoc_rl.ingest.driver import ingest_paths

    raw = bundled_raw()
    trajs = ingest_paths([raw], progress=False).trajectories
    out = write_dataset(trajs, tmp_path / "d", inputs=(p for p in [raw]))  # read once by the check
    assert "MIT (" in (out / "README.md").read_text()


def test_a_folder_of_logs_given_as_a_dataset_is_told_to_be_ingested_not_written_over(tmp_path):
    import pytest

    from dtoc_rl.data.dataset import DatasetError, load_trajectories

    (tmp_path / "run.traj.json").write_text("{}")
    with pytest.raises(DatasetError, match=rf"not a dataset; .*`dtoc-rl ingest {tmp_path} -o DATASET`"):
        load_trajectories(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match=rf"ingest LOGS -o {empty}`"):
        load_trajectories(empty)
