"""``dtoc-rl replay`` on a log that holds several trajectories: --list-trajs and --traj pick one."""

import json

from dtoc_rl.cli import main


def _run(i: int) -> dict:
    return {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"task number {i}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": f"ls dir{i}"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": "file\n" * (10 + 40 * i)},
            {"role": "assistant", "content": "done"},
        ],
    }


def _log(tmp_path):
    p = tmp_path / "runs.json"
    p.write_text(json.dumps([_run(0), _run(1), _run(2)]))
    return p


def test_list_and_pick(tmp_path, capsys):
    log = _log(tmp_path)
    assert main(["replay", str(log), "--list-trajs", "--json"]) == 0
    ids = json.loads(capsys.readouterr().out)["trajectories"]
    assert len(ids) == 3 and len(set(ids)) == 3
    sizes = []
    for pick in ("0", "2", ids[1]):
        assert main(["replay", str(log), "--traj", pick, "--json"]) == 0
        r = json.loads(capsys.readouterr().out)
        sizes.append(r["all_visible"]["total"])
        assert r["traj_id"] == (ids[int(pick)] if pick.isdigit() else pick)
    assert sizes[0] < sizes[2] < sizes[1]  # the third run's output is the largest


def test_a_missing_pick_is_one_line(tmp_path, capsys):
    log = _log(tmp_path)
    assert main(["replay", str(log), "--traj", "7"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no trajectory 7" in err and "holds 3" in err and "\n" not in err
