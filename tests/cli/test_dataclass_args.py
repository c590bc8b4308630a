"""Flags made from a dataclass's fields: its checks' errors name the flags a user typed."""

from __future__ import annotations

import pytest

from dtoc_rl.cli import main
from dtoc_rl.cli.dataclass_args import flags_named


def test_a_field_in_an_error_is_named_as_its_flag():
    names = ["epochs", "val_fraction", "dagger_threshold", "dagger_threshold_max", "mode"]
    assert flags_named("epochs must be >= 1, got 0", names) == "--epochs must be >= 1, got 0"
    both = "dagger_threshold and dagger_threshold_max must satisfy low <= high"
    assert (
        flags_named(both, names) == "--dagger-threshold and --dagger-threshold-max must satisfy low <= high"
    )
    # a one-word field inside the sentence may be the plain word: left as it is
    assert flags_named("val_fraction leaves no epochs of data", names) == (
        "--val-fraction leaves no epochs of data"
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--epochs", "0"], "dtoc-rl: error: --epochs must be >= 1, got 0"),
        (["--val-fraction", "2"], "dtoc-rl: error: --val-fraction must be in (0, 1), got 2.0"),
    ],
)
def test_train_names_the_flag_that_was_wrong(tmp_path, capsys, argv, said):
    assert main(["train", "-o", str(tmp_path / "c"), *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [said]
    assert not (tmp_path / "c").exists()
