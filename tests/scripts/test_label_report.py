"""scripts/label_report.py on the bundled raw sample: JSON with every need kind, and a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtoc_rl.data.schema import NEED_KINDS
from scripts.label_report import main

RAW = Path(__file__).resolve().parents[2] / "data" / "raw"


def test_json_report_on_the_bundled_logs(capsys):
    assert main([str(RAW / "mini-swe-agent_gemini-3-pro_swebench-verified"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    kinds = report["sources"]["mini-swe-agent"]["needs_by_kind"]
    assert set(kinds) == set(NEED_KINDS) and kinds["provenance"] > 0 and kinds["edit"] > 0


def test_missing_path_is_an_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["/no/such/logs"])
    assert e.value.code == 2
    assert "no such file or folder: /no/such/logs" in capsys.readouterr().err
