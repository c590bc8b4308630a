"""Flags made from a dataclass's fields: its checks' errors name the flags a user typed."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from dtoc_rl.cli import main
from dtoc_rl.cli.dataclass_args import add_args_fields, flags_named


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


@dataclass
class _Args:
    name: str = "runs/x"
    """where it goes, 100% local"""
    count: int = 2
    """how many (default two)"""
    ratios: list[float] = field(default_factory=lambda: [0.5, 1.0])
    """ratios to try"""
    quiet: bool = False
    """say less"""
    color: bool = True
    """colour the table"""


def _parser(special=None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="x")
    add_args_fields(p, _Args, special)
    return p


def test_a_scripts_args_become_flags_of_their_types():
    assert vars(_parser().parse_args([])) == {
        "name": "runs/x", "count": 2, "ratios": [0.5, 1.0], "quiet": False, "color": True,
    }  # fmt: skip
    got = _parser().parse_args(["--count", "3", "--ratios", "0.1", "0.2", "--quiet", "--no-color"])
    assert _parser().parse_args(["--quiet", "--no-quiet"]).quiet is False  # the last one given wins
    assert (got.count, got.ratios, got.quiet, got.color) == (3, [0.1, 0.2], True, False)
    with pytest.raises(SystemExit):
        _parser().parse_args(["--count", "x"])


def test_args_help_is_the_field_docstring_with_its_default_said_once(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "where it goes, 100% local (default: runs/x)" in out  # a % in a docstring is no format
    assert "how many (default two)" in out and "(default two) (default" not in out
    assert "ratios to try (default: 0.5 1.0)" in out


def test_a_field_can_take_its_own_keywords():
    def positive(v: str) -> int:
        if int(v) < 1:
            raise argparse.ArgumentTypeError("must be >= 1")
        return int(v)

    p = _parser({"count": {"type": positive}, "ratios": {"nargs": "*"}})
    assert p.parse_args(["--ratios"]).ratios == []
    with pytest.raises(SystemExit):
        p.parse_args(["--count", "0"])


def test_a_fields_type_is_its_annotation_and_a_field_without_default_is_required():
    @dataclass
    class Args:
        target: str
        """where to"""
        rate: float = 0
        """a rate, default written as an integer"""

    p = argparse.ArgumentParser(prog="x")
    add_args_fields(p, Args)
    assert p.parse_args(["--target", "t", "--rate", "0.5"]).rate == 0.5
    with pytest.raises(SystemExit):
        p.parse_args(["--rate", "1"])  # --target missing


def test_a_percent_in_a_default_is_no_format_in_the_help(capsys):
    @dataclass
    class Args:
        label: str = "%d items"
        """how to say it"""

    p = argparse.ArgumentParser(prog="x")
    add_args_fields(p, Args)
    with pytest.raises(SystemExit):
        p.parse_args(["--help"])
    assert "(default: %d items)" in capsys.readouterr().out
