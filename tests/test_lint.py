import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff not installed (it is in the test extra)")
def test_ruff_clean():
    proc = subprocess.run(
        ["ruff", "check", "--output-format", "concise", "dtoc_rl", "envs", "policies", "scripts", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
