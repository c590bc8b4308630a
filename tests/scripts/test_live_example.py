"""``scripts/live_example.py``: a scripted dry run end to end (task, policy, log, re-ingest)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from scripts import live_example


def test_help_runs_as_a_module(repo_root):
    res = subprocess.run(
        [sys.executable, "-m", "scripts.live_example", "--help"],
        cwd=repo_root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0 and "--scripted" in res.stdout and "--model-path" in res.stdout


def test_scripted_dry_run_solves_the_task_and_reingests(tmp_path, capsys):
    out = tmp_path / "out"
    code = live_example.main(["--scripted", "--task", "pagination", "--policy", "last_n:n=2",
                              "--out", str(out), "--json"])  # fmt: skip
    assert code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["success"] is True and r["end"] == "submit" and r["ingest_exit_code"] == 0
    assert r["outputs"] == 8 and r["hidden_at_end"] == 5 and r["changes"] == 5
    assert r["misses"] >= 1  # pager.py was read again after the policy hid it
    assert [t["hidden"] for t in r["turns"]][:4] == [0, 0, 0, 1]
    (t,) = load_trajectories(out / "dataset")
    assert t.task_id == "pagination" and t.success is True and t.n_steps == 8
    assert json.loads(t.extra)["dtoc_policy"].startswith("last_n")


def test_the_dry_runs_masking_survives_the_reingest(tmp_path, capsys):
    out = tmp_path / "out"
    assert live_example.main(["--scripted", "--policy", "last_n:n=2", "--out", str(out), "--json"]) == 0
    (t,) = load_trajectories(out / "dataset")
    assert all(s.masked_before is not None for s in t.steps) and t.steps[-1].masked_before
    assert sum(len(s.events) for s in t.steps) >= 1


def test_a_damaged_session_db_is_a_one_line_error(tmp_path):
    bad = tmp_path / "session.db"
    bad.write_bytes(b"this is not an sqlite database at all" * 4)
    with pytest.raises(SystemExit) as e:
        live_example.main(["--scripted", "--session-db", str(bad), "--out", str(tmp_path / "out")])
    assert "error:" in str(e.value) and "session.db" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--scripted", "--policy", "no/such/ckpt"], "error: no checkpoint folder at 'no/such/ckpt'"),
        (["--model-path", "/no/such/model"], "error: no model folder at /no/such/model"),
    ],
)
def test_mistakes_are_one_line_errors_and_nothing_is_ingested(tmp_path, argv, says):
    with pytest.raises(SystemExit) as e:
        live_example.main([*argv, "--out", str(tmp_path / "out")])
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out" / "dataset").exists()


def test_an_unreachable_endpoint_is_named_and_nothing_is_ingested(tmp_path, monkeypatch):
    import types

    httpx = pytest.importorskip("httpx")
    openai = pytest.importorskip("openai")

    class Unreachable:  # what the SDK raises when nothing listens (no socket opened here)
        def __init__(self, base_url=None, **kw):
            self.base_url = base_url
            self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self.create))

        def create(self, **kw):
            raise openai.APIConnectionError(
                request=httpx.Request("POST", f"{self.base_url}/chat/completions")
            )

    monkeypatch.setattr(openai, "OpenAI", Unreachable)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gpu-box.invalid:8000/v1")
    with pytest.raises(SystemExit) as e:
        live_example.main(["--openai-model", "m", "--out", str(tmp_path / "out")])
    assert "the first model call failed: OpenAI-compatible endpoint http://gpu-box.invalid:8000/v1" in str(
        e.value
    )
    assert not (tmp_path / "out" / "dataset").exists()


def test_learned_checkpoint_in_hybrid_mode_with_a_sqlite_session(tmp_path, capsys):
    ckpt = LearnedPolicyConfig(n_layers=1, d_model=32).create().save(tmp_path / "ckpt")
    code = live_example.main(
        ["--scripted", "--task", "date_parsing", "--policy", str(ckpt), "--mode", "hybrid",
         "--session-db", str(tmp_path / "s.sqlite"), "--session-id", "run1", "--out", str(tmp_path / "o")]
    )  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "success True" in text and "mode hybrid" in text and "learned" in text
    assert (tmp_path / "s.sqlite").is_file() and (tmp_path / "o" / "dataset").is_dir()


def test_replaying_a_bundled_trace_against_the_service(tmp_path, capsys, monkeypatch):
    from dtoc_rl.policies.registry import make_policy
    from dtoc_rl.serve.service import DecisionService, serve_in_thread

    srv, _ = serve_in_thread(DecisionService(make_policy("last_n:n=5")), "127.0.0.1", 0)
    monkeypatch.setenv("DTOC_TOKEN", srv.token)  # RemotePolicy sends it
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        code = live_example.main(["--replay", "django__django-11239", "--service", url,
                                  "--out", str(tmp_path), "--json"])  # fmt: skip
    finally:
        srv.shutdown()
        srv.server_close()
    assert code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["end"] == "replayed" and r["ingest_exit_code"] == 0 and r["policy"].startswith("remote(")
    assert r["calls"] == len(r["turns"]) >= 10 and r["changes"] >= 5
    assert [t["hidden"] for t in r["turns"]][5:8] == [0, 1, 2]  # keep-last-5 from the 7th call on
