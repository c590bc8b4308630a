"""The evaluation tables print a checkpoint's label as it is: rich reads `[...]` as markup."""

from rich.console import Console

from dtoc_rl.cli.evaluate import print_done_when, print_rows


def _row(policy: str) -> dict:
    row = {"policy": policy, "group_by": "overall", "group": "all", "n": 3, "errors": 0}
    for k in ("savings", "token_savings", "placeholder_overhead", "oracle_fraction"):
        row[k] = 0.1
    for k in ("savings_lo", "savings_hi", "mean_active_tokens", "misses_per_100", "rereads", "mgmt_calls"):
        row[k] = 1.0
    row["dollars"] = 12.345
    return row


def test_rows_read_back_from_json_print_their_dollars_and_a_dash_for_no_share():
    import json

    rows = json.loads(json.dumps([{**_row("oracle"), "oracle_fraction": float("nan")}, _row("none")]))
    rows[0]["oracle_fraction"] = None  # as metrics.json holds a NaN
    rows[1]["dollars"] = 0.01234
    console = Console(record=True, width=250)
    print_rows(rows, console=console)
    text = console.export_text()
    assert "$ billed" in text and "$12.35" in text and "$0.0123" in text
    oracle_line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("oracle"))
    assert oracle_line.rstrip(" │").endswith("—")


def test_two_checkpoints_keep_their_folders_in_the_tables():
    console = Console(record=True, width=250)
    print_rows([_row("learned:path=/tmp/a/ckpt-mine"), _row("learned:path=/tmp/a/ckpt")], console=console)
    done = {
        "group_by": "overall", "group": "all", "n": 3, "policy": "learned:path=/tmp/a/ckpt-mine",
        "savings": 0.1, "savings_lo": 0.0, "savings_hi": 0.2, "misses_per_100": 0.5, "oracle_savings": 0.2,
        "oracle_fraction": 0.5, "reaches": False, "no_loss": True, "best_rule": "learned:path=/tmp/a/ckpt",
        "best_rule_savings": 0.05, "best_rule_misses_per_100": 0.1, "beats_rules": True,
    }  # fmt: skip
    print_done_when([done], 1.0, console=console)
    text = console.export_text()
    assert text.count("learned[a/ckpt-mine]") == 2 and text.count("learned[a/ckpt]") == 2


def test_two_settings_of_one_checkpoint_keep_their_settings_in_the_tables():
    from dtoc_rl.policies.registry import short_label

    console = Console(record=True, width=250)
    ck = "learned:path=/tmp/a/ckpt,threshold=0.1"
    print_rows([_row(ck), _row(ck + ",cold_scale=3")], console=console)
    text = console.export_text()
    assert "learned[a/ckpt] t=0.1 cold_scale=3" in text and text.count("learned[a/ckpt] t=0.1") == 2
    assert short_label("learned:path=/tmp/a/ckpt") == "learned[a/ckpt]"
    assert short_label("learned:path=/tmp/a/ckpt,miss_governor=0.5,threshold=0.2") == (
        "learned[a/ckpt] miss_governor=0.5 t=0.2"
    )


def test_a_policy_that_failed_on_some_runs_is_named_as_left_out_of_the_checks():
    from dtoc_rl.policies.evaluate import done_when

    rows = [{**_row("oracle"), "savings": 0.3}, {**_row("learned:path=/tmp/a/ckpt"), "n": 1, "errors": 2}]
    console = Console(record=True, width=250)
    print_done_when(done_when(rows), 1.0, console=console)
    text = console.export_text()
    assert "none within budget (failed runs: see below)" in text
    assert (
        "left out of the done-when checks, having failed on some runs (see the failures above): "
        "learned[a/ckpt]" in text
    )


def test_a_group_where_only_a_rule_failed_says_none_within_budget():
    from dtoc_rl.policies.evaluate import done_when

    rows = [{**_row("oracle"), "savings": 0.3}, {**_row("learned:path=/tmp/a/ckpt"), "misses_per_100": 5.0},
            {**_row("cache_clear"), "n": 2, "errors": 1}]  # fmt: skip
    console = Console(record=True, width=250)
    print_done_when(done_when(rows), 1.0, console=console)
    text = console.export_text()
    assert "none within budget" in text and "failed runs: see below" not in text and "cache_clear" in text
