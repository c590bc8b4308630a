import json
import warnings
from types import SimpleNamespace

import pytest

from scripts.leave_one_family_out import left_out_families, main


def _eps(counts):
    return [SimpleNamespace(model_family=f) for f, n in counts.items() for _ in range(n)]


def test_families_with_enough_runs_are_left_out_and_unknown_ones_are_an_error():
    eps = _eps({"gpt-4o": 30, "claude-sonnet": 25, "doubao-pro": 5})
    assert left_out_families(eps, [], 20) == ["claude-sonnet", "gpt-4o"]
    assert left_out_families(eps, ["doubao-pro"], 20) == ["doubao-pro"]
    with pytest.raises(ValueError, match=r"not in the dataset: \['llama'\]"):
        left_out_families(eps, ["llama"], 20)


def test_a_bad_family_is_a_one_line_error(capsys):
    assert main(["--dataset", "no/such/folder", "--families", "gpt-4o"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err


@pytest.mark.slow
def test_left_out_family_is_never_trained_on_and_is_evaluated_whole(tmp_path, monkeypatch, capsys):
    from dtoc_rl.paths import bundled_dataset
    from dtoc_rl.policies import learned_trainer

    trained_on = []
    real = learned_trainer.split_by_task

    def spy(eps, *a):
        trained_on.extend(e.model_family for e in eps)
        return real(eps, *a)

    monkeypatch.setattr(learned_trainer, "split_by_task", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        argv = ["--dataset", str(bundled_dataset()), "--out", str(tmp_path), "--families", "gemini-3-pro"]
        assert main([*argv, "--epochs", "1", "--json"]) == 0
    assert trained_on and "gemini-3-pro" not in trained_on
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["family"] == "gemini-3-pro" and entry["trajectories"] == 12  # every run of the family
    assert entry["learned"]["savings_lo"] <= entry["learned"]["savings"] <= entry["learned"]["savings_hi"]
    assert entry["oracle"]["savings"] > 0
    assert json.loads((tmp_path / "lofo.json").read_text()) == [entry]
    assert (tmp_path / "gemini-3-pro" / "model.safetensors").is_file()
