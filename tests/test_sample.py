"""The committed bundled dataset matches what ingesting the bundled raw logs gives today."""

from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.data.paths import bundled_dataset, bundled_raw
from dtoc_rl.ingest.driver import ingest_paths


def test_bundled_dataset_is_up_to_date():
    fresh = {t.traj_id: t for t in ingest_paths([bundled_raw()], progress=False).trajectories}
    stored = {t.traj_id: t for t in load_trajectories(bundled_dataset())}
    assert set(fresh) == set(stored), "run `python -m scripts.build_sample`"
    for tid, t in fresh.items():
        assert t == stored[tid], f"{tid} differs: run `python -m scripts.build_sample`"


def test_bundled_sample_covers_three_mit_sources():
    sources = {t.source for t in load_trajectories(bundled_dataset())}
    assert sources == {"mini-swe-agent", "openhands-sdk", "tau-bench"}


def test_the_committed_card_names_no_machines_folders():
    """The card and summary are rebuilt by scripts.build_sample with paths relative to the checkout."""
    import json

    from dtoc_rl.data.paths import bundled_dataset

    card = (bundled_dataset() / "README.md").read_text()
    assert "Made with: `dtoc-rl ingest data/raw -o data/sample`" in card
    summary = json.loads((bundled_dataset() / "summary.json").read_text())
    assert summary["out"] == "data/sample" and "auxiliary_paths" in summary
    assert not any(p.startswith("/") for p in summary["auxiliary_paths"])
