"""scripts.need_ceiling on the bundled sample: its table is what it says."""

from __future__ import annotations

import json

import pytest

from scripts import need_ceiling

pytest.importorskip("sklearn")  # the analysis extra; in the test extra too, so CI runs this


def test_the_table_on_the_sample(capsys):
    assert (
        need_ceiling.main(
            ["--dataset", "data/sample", "--min-tasks", "2", "--text", "none", "words", "--json"]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["outputs"] > r["test_outputs"] > 0 and set(r["by_text"]) == {"none", "words"}
    for kind in r["by_text"].values():
        assert 0.5 < kind["auc"] <= 1.0  # better than chance on the sample's held-out tasks
        rows = kind["thresholds"]
        assert [t["threshold"] for t in rows] == list(need_ceiling.THRESHOLDS)
        assert all(0 <= t["hidden_share"] <= 1 and t["misses_per_100"] >= 0 for t in rows)
    assert r["by_text"]["none"]["thresholds"][-1]["hidden_share"] > 0  # the loosest threshold hides


def test_too_few_words_is_a_clear_error():
    with pytest.raises(SystemExit, match="words in >= 500 training tasks"):
        need_ceiling.main(["--dataset", "data/sample", "--min-tasks", "500", "--text", "words"])
