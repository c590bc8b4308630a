"""The OpenCode plugin's own Node tests (``node --test``) against the real ``dtoc-rl serve``.

Skipped when ``node`` is not installed.  The plugin has no npm dependencies, so
nothing is installed; the Node tests start the service with this interpreter.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[2] / "integrations" / "opencode"
NODE = shutil.which("node")


def _node_major() -> int:
    out = subprocess.run([NODE, "--version"], capture_output=True, text=True, timeout=30).stdout
    return int(out.strip().lstrip("v").split(".")[0] or 0)


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_opencode_plugin_node_tests_pass_against_the_real_service():
    if _node_major() < 20:
        pytest.skip("the plugin's tests need node >= 20 (global fetch, node:test)")
    env = dict(os.environ, DTOC_PYTHON=sys.executable)
    res = subprocess.run(
        [NODE, "--test", "--test-reporter=tap", "test/dtoc.test.js"],
        cwd=PLUGIN,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, f"node --test failed:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    passed = re.search(r"^# pass (\d+)$", res.stdout, re.M)
    assert "# fail 0" in res.stdout and passed and int(passed.group(1)) >= 14, res.stdout[-3000:]


def _opencode_bin() -> str | None:
    """The real OpenCode: OPENCODE_BIN, or `npm install --no-save opencode-ai` in the plugin folder."""
    for cand in (os.environ.get("OPENCODE_BIN"), str(PLUGIN / "node_modules" / ".bin" / "opencode")):
        if cand and Path(cand).is_file():
            return cand
    return None


@pytest.mark.slow  # starts OpenCode itself: about 30 s
@pytest.mark.skipif(
    NODE is None or _opencode_bin() is None, reason="node or the opencode-ai package is missing"
)
def test_the_real_opencode_sends_the_model_placeholders():
    env = dict(os.environ, DTOC_PYTHON=sys.executable, OPENCODE_BIN=_opencode_bin())
    res = subprocess.run(
        [NODE, "--test", "--test-reporter=tap", "test/opencode.test.js"],
        cwd=PLUGIN,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, f"node --test failed:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    assert "# pass 1" in res.stdout and "# skipped 0" in res.stdout, res.stdout[-3000:]


def test_plugin_package_has_no_runtime_dependencies():
    import json

    pkg = json.loads((PLUGIN / "package.json").read_text())
    assert not pkg.get("dependencies"), "the plugin must run unbuilt with no npm install"
    assert pkg["type"] == "module" and (PLUGIN / pkg["main"]).is_file()
