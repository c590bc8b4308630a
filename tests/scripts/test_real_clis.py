"""scripts.real_clis: the integration tests' CLIs found in a folder, installed only where missing."""

from __future__ import annotations

import json
import stat

import pytest

from scripts import real_clis


def _fake_bin(folder, name):
    path = folder / "node_modules" / ".bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_what_a_folder_holds_is_named_and_nothing_is_installed_when_all_are_there(
    tmp_path, monkeypatch, capsys
):
    for c in real_clis.CLIS:
        _fake_bin(tmp_path, c.binary)
    (tmp_path / "node_modules" / ".bin" / "pi").chmod(0o644)  # not executable: not a binary to run
    monkeypatch.setattr(real_clis, "install", lambda *a, **k: pytest.fail("installed what was there"))
    assert real_clis.main(["--dir", str(tmp_path), "--only", "CLAUDE_BIN", "CODEX_BIN", "--json"]) == 0
    have = json.loads(capsys.readouterr().out)
    assert set(have) == {"CLAUDE_BIN", "CODEX_BIN"} and have["CODEX_BIN"].endswith("/.bin/codex")
    assert real_clis.main(["--dir", str(tmp_path), "--no-install"]) == 0
    out, err = capsys.readouterr()
    assert "export OPENCODE_BIN=" in out and "PI_BIN" not in out and "not in" in err and "PI_BIN" in err


def test_missing_clis_are_installed_at_their_checked_versions_and_npm_failing_is_one_line(
    tmp_path, monkeypatch
):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        for c in real_clis.CLIS:
            _fake_bin(tmp_path, c.binary)
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(real_clis.shutil, "which", lambda name: "/usr/bin/npm")
    monkeypatch.setattr(real_clis.subprocess, "run", fake_run)
    assert real_clis.main(["--dir", str(tmp_path), "--json"]) == 0
    (cmd,) = calls
    assert "@anthropic-ai/claude-code@2.1.332" in cmd and "opencode-ai@1.18.33" in cmd
    monkeypatch.setattr(
        real_clis.subprocess,
        "run",
        lambda cmd, **kw: type("Done", (), {"returncode": 1, "stderr": "a\nE404 gone"})(),
    )
    with pytest.raises(SystemExit, match=r"^real_clis: npm install failed \(1\): E404 gone$"):
        real_clis.main(["--dir", str(tmp_path / "other")])
    monkeypatch.setattr(real_clis.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="npm is not installed"):
        real_clis.main(["--dir", str(tmp_path / "other")])
