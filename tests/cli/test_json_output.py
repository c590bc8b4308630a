"""--json output is strict JSON: tools such as jq and JSON.parse refuse NaN and Infinity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dtoc_rl.cli.common import emit_json


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_nan_and_infinities_become_null(capsys):
    emit_json({"a": float("nan"), "b": [float("inf"), 1.5], "c": np.float32("nan"), "d": (np.int64(3),)})
    out = _strict(capsys.readouterr().out)
    assert out == {"a": None, "b": [None, 1.5], "c": None, "d": [3]}


@pytest.mark.parametrize("command", ["ingest", "stats", "replay", "train", "evaluate", "calibrate", "demo"])
def test_every_command_that_works_for_a_while_takes_quiet(command):
    import argparse
    import importlib

    from dtoc_rl.cli import COMMANDS

    p = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[command][0]).add_arguments(p)
    assert "--quiet" in p._option_string_actions, command


def test_a_mistyped_option_is_one_line_naming_the_nearest(capsys):
    from dtoc_rl.cli import main

    with pytest.raises(SystemExit) as e:
        main(["evaluate", "-p", "none", "--mis-budget", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unrecognized arguments: --mis-budget 1 (did you mean --miss-budget?)" in err[0]
    with pytest.raises(SystemExit):
        main(["stats"])  # a missing argument: still one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "required: dataset" in err[0] and "'dtoc-rl stats --help'" in err[0]
