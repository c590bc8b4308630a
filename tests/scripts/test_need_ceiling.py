"""scripts.need_ceiling on the bundled sample: its table is what it says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scripts import need_ceiling

pytest.importorskip("sklearn")  # the analysis extra; in the test extra too, so CI runs this


def test_the_table_on_the_sample(capsys):
    assert (
        need_ceiling.main(
            ["--dataset", "data/sample", "--min-tasks", "2", "--text", "none", "words", "--json"]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["outputs"] > r["test_outputs"] > 0 and set(r["by_text"]) == {"none", "words"}
    for kind in r["by_text"].values():
        assert 0.5 < kind["auc"] <= 1.0  # better than chance on the sample's held-out tasks
        rows = kind["thresholds"]
        assert [t["threshold"] for t in rows] == list(need_ceiling.THRESHOLDS)
        assert all(0 <= t["hidden_share"] <= 1 and t["misses_per_100"] >= 0 for t in rows)
    assert r["by_text"]["none"]["thresholds"][-1]["hidden_share"] > 0  # the loosest threshold hides


def test_too_few_words_is_a_clear_error():
    with pytest.raises(SystemExit, match="words in >= 500 training tasks"):
        need_ceiling.main(["--dataset", "data/sample", "--min-tasks", "500", "--text", "words"])


def test_relation_rows_are_on_the_sample(capsys):
    argv = ["--dataset", "data/sample", "--min-tasks", "2", "--text", "none", "--relation", "latest", "next"]
    assert need_ceiling.main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["by_text"]) == {"none", "none+latest", "none+next"}
    assert all(0.5 < v["auc"] <= 1.0 for v in r["by_text"].values())


def _out(task, traj, step, text):
    return need_ceiling.Output(task, "src", traj, 6, step, 100, 0, False, [], 99, 99, (), text)


def test_relation_counts_task_specific_words_shared_with_the_steps_around_the_decision():
    outs = [
        _out("t1", "a", 0, "view src/parser_core.py\ndef parse_header(x):"),
        _out("t2", "b", 0, "view src/other.py"),  # another task: 'view' and 'src' are in both, so common
    ]
    w = need_ceiling.idents
    steps = {
        "a": [
            (0, w(""), w("")),
            (1, w("the parse_header bug"), w('{"path": "src/parser_core.py"}')),  # the call before step 2's
            (2, w(""), w("edit parse_header def view")),  # step 2: the step decided at age 2
            (2, w("parser_core"), w("parse_header def")),  # step 3: the same model call as step 2
        ],
        "b": [(0, w(""), w(""))] * 4,
    }
    meta = np.array([[0, 2], [1, 2], [0, 3]])
    train = np.array([True, True])
    latest = need_ceiling.relation("latest", outs, steps, meta, train, min_tasks=2)
    # output 0 at age 2: the thought of step 1 names parse_header, its arguments parser_core ('src' is
    # common, 'py' too short to be a name); at age 3 (step 3 decided) step 2 is of the same model call
    # as step 3, not made yet when it is decided: step 1 is still the latest
    assert latest.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
    nxt = need_ceiling.relation("next", outs, steps, meta, train, min_tasks=2)
    assert nxt.tolist() == [[2.0], [0.0], [2.0]]  # parse_header and def; 'view' is common to both tasks
    every = need_ceiling.relation("latest", outs, steps, meta, train, min_tasks=3)  # nothing common
    assert every[0].tolist() == [1.0, 2.0]  # parser_core and src
    same_task = [_out("t1", "a", 0, outs[0].text), need_ceiling.Output(*[*vars(outs[1]).values()])]
    same_task[1].source, same_task[1].task = "other-harness", "t1"  # one task name, two harnesses
    two = need_ceiling.relation("latest", same_task, steps, meta, train, min_tasks=2)
    np.testing.assert_array_equal(two, latest)  # tasks count per harness, as the policy's vocabulary


def _sized(traj, step, tokens, needs, steps=20):
    return need_ceiling.Output("t", "src", traj, steps, step, tokens, 0, False, needs, 99, 99, (), "")


def test_schedule_hides_each_output_at_its_first_row_until_a_need():
    outs = [_sized("a", 0, 1000, [5]), _sized("a", 2, 500, [])]  # one run of 20 steps
    meta = np.array([[0, 2], [0, 3], [1, 2], [1, 4]])
    # output 0 hidden at age 2 (step 2) until its need at step 5: a miss, 3 steps hidden; output 1
    # hidden first at age 4 (step 6) to the end of the run (steps 6..19): 14 steps; hideable: output 0
    # after its last need (steps 6..19, 14 steps), output 1 after its first read (steps 4..19, 16 steps)
    r = need_ceiling.schedule(outs, meta, np.array([True, True, False, True]), [0, 1])
    assert r["misses_per_100"] == pytest.approx(100 * 1 / 20)
    assert r["hidden_share"] == pytest.approx((1000 * 3 + 500 * 14) / (1000 * 14 + 500 * 16))
    none = need_ceiling.schedule(outs, meta, np.zeros(4, bool), [0, 1])
    assert none == {"misses_per_100": 0.0, "hidden_share": 0.0}


def test_a_value_weighted_rule_hides_the_output_worth_more_at_the_same_probability():
    outs = [_sized("a", 10, 20_000, []), _sized("a", 10, 200, [])]
    meta = np.array([[0, 2], [1, 2]])
    # worth: tokens x steps so far (12, under the cap) / 20,000
    np.testing.assert_allclose(need_ceiling.worth(outs, meta), [12.0, 0.12])
    capped = need_ceiling.worth([_sized("a", 90, 20_000, [], steps=200)], np.array([[0, 2]]))
    np.testing.assert_allclose(capped, [need_ceiling.HORIZON_CAP])
    p, rows = np.array([0.05, 0.05]), np.array([True, True])
    flat, _ = need_ceiling.curve(outs, meta, p, rows, [0, 1], alpha=0.0)
    weighted, best = need_ceiling.curve(outs, meta, p, rows, [0, 1], alpha=1.0)
    at = {r["threshold"]: r for r in flat}, {r["threshold"]: r for r in weighted}
    assert at[0][0.03]["hidden_share"] == 0.0  # one threshold: P 0.05 is above it for both
    # weighted, t = 0.03: the large output's bar is 0.36 (hidden), the small one's 0.0036 (kept)
    big_only = 20_000 * 8 / (20_000 * 8 + 200 * 8)
    assert at[1][0.03]["hidden_share"] == pytest.approx(big_only)
    assert best is not None and best["hidden_share"] == pytest.approx(1.0) and best["misses_per_100"] == 0


def test_alpha_rows_on_the_sample(capsys):
    argv = ["--dataset", "data/sample", "--min-tasks", "2", "--text", "none", "--alpha", "0", "0.5"]
    assert need_ceiling.main([*argv, "--miss-budget", "10", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["by_text"]) == {"none", "none a=0.5"}
    plain, weighted = r["by_text"]["none"], r["by_text"]["none a=0.5"]
    assert plain["auc"] == weighted["auc"]  # one classifier, two hide rules
    for row in (plain, weighted):
        best = row["best"]
        assert best["misses_per_100"] <= 10 and best["threshold"] in need_ceiling.DENSE
        # no printed cell within the budget hides more than the best
        assert all(
            c["hidden_share"] <= best["hidden_share"] for c in row["thresholds"] if c["misses_per_100"] <= 10
        )
    assert set(need_ceiling.THRESHOLDS) <= set(need_ceiling.DENSE)
    assert need_ceiling.main(argv) == 0  # the table prints
    assert "best" in capsys.readouterr().out


@pytest.mark.parametrize(
    "bad", [["--alpha", "-1"], ["--alpha", "9"], ["--miss-budget", "-1"], ["--miss-budget", "nan"]]
)
def test_bad_weights_are_one_line_errors(bad, capsys):
    with pytest.raises(SystemExit):
        need_ceiling.main(["--dataset", "data/sample", *bad])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m scripts.need_ceiling: error: --")
