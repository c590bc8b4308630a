"""Plots a reader can use: labels never overprint, the learned policy is always visible and on top,
curves keep their legend off the data with whole-number call ticks, and png/pdf/svg are written."""

import itertools

import pytest
from matplotlib.text import Text

from dtoc_rl.cli import main
from dtoc_rl.plots import curves_figure, pareto_figure, plot_pareto, plot_token_curves, policy_family


def _row(policy, misses, savings, group=("overall", "all")):
    return {"group_by": group[0], "group": group[1], "policy": policy, "savings": savings,
            "savings_lo": savings - 0.05, "savings_hi": savings + 0.05, "misses_per_100": misses,
            "misses_per_100_lo": max(0.0, misses - 0.5), "misses_per_100_hi": misses + 0.5}  # fmt: skip


# what the demo gives on the bundled sample: eight policies on top of each other at (0, 0)
CROWDED = [
    _row("none", 0, 0), _row("anthropic_clear:trigger=20000", 0, 0),
    _row("anthropic_clear:trigger=100000", 0, 0), _row("budget:budget=32000", 0, 0),
    _row("obs_mask:attention_window=100", 0, 0), _row("opencode_prune", 0, 0),
    _row("learned:path=runs/p/policy,threshold=0.02", 0, 0),
    _row("learned:path=runs/p/policy,threshold=0.1", 0, 0),
    _row("learned:path=runs/p/policy,threshold=0.5", 1.1, -0.005), _row("oracle", 0, 0.05),
    _row("last_n:n=5", 2.2, -0.86), _row("last_n:n=10", 0, -0.62),
    _row("obs_mask:attention_window=5", 2.2, -0.63), _row("budget:budget=8000", 0, -0.14),
]  # fmt: skip


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_pareto_labels_never_overlap_and_stay_inside_the_axes():
    fig, ax, labels = pareto_figure(CROWDED)
    r = fig.canvas.get_renderer()
    boxes = []
    for lb in labels:
        lb.get_window_extent(r)  # places the text at its offset ...
        boxes.append(Text.get_window_extent(lb, r))  # ... whose box, without the leader line, we need
    assert len(boxes) == len(CROWDED)
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        assert not _overlap(a, b), f"{labels[i].get_text()!r} overlaps {labels[j].get_text()!r}"
    axbox = ax.get_window_extent(r)
    for lb, b in zip(labels, boxes):
        assert axbox.x0 <= b.x0 and b.x1 <= axbox.x1 and axbox.y0 <= b.y0 and b.y1 <= axbox.y1, lb.get_text()
    texts = {lb.get_text() for lb in labels}
    assert {"learned t=0.02", "learned t=0.1", "none", "oracle", "budget 32k", "last_n n=5"} <= texts


def test_pareto_draws_the_learned_policy_on_top_and_inside_the_limits():
    fig, ax, _ = pareto_figure(CROWDED)
    data = [ln for ln in ax.get_lines() if ln.get_marker() not in (None, "None", "", "_", "|")]
    learned = [ln for ln in data if ln.get_color() == "crimson"]
    assert len(learned) == 1, "the learned policy has its own series"
    assert learned[0].get_zorder() > max(o.get_zorder() for o in data if o is not learned[0])
    assert len(learned[0].get_xydata()) == 3
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for x, y in learned[0].get_xydata():
        assert x0 < x < x1 and y0 < y < y1


def test_token_curves_keep_the_legend_off_the_data_with_whole_call_ticks():
    curves = {
        f"src/task{k}": {p: [1000 * (i + 1) + 37 * k * i for i in range(n)]
                         for p in ["none", "oracle", "last_n:n=5", "last_n:n=10",
                                   "obs_mask:attention_window=5", "budget:budget=8000",
                                   "learned:path=x/policy,threshold=0.1"]}
        for k, n in ((0, 7), (1, 23), (2, 5))
    }  # fmt: skip
    fig, axes, legend = curves_figure(curves)
    r = fig.canvas.get_renderer()
    lbox = legend.get_window_extent(r)
    for ax in axes[:, 0]:
        assert not _overlap(lbox, ax.get_window_extent(r)), "the legend covers a panel"
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert len(legend.get_texts()) == 7


def test_a_hindsight_variant_of_the_oracle_is_drawn_apart_from_the_oracle():
    rows = [*CROWDED, _row("oracle:restores=0", 0, 0.045)]
    fig, ax, labels = pareto_figure(rows)
    stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
    assert len(stars) == 2 and {len(ln.get_xydata()) for ln in stars} == {1}  # two points, no line
    assert sorted(str(ln.get_markerfacecolor()) for ln in stars) == ["black", "none"]
    assert {"oracle", "oracle restores=0"} <= {lb.get_text() for lb in labels}
    curves = {"src/t": {p: [1000, 900, 800] for p in ["none", "oracle", "oracle:restores=0", "last_n:n=5"]}}
    fig, axes, legend = curves_figure(curves)
    lines = {ln.get_label(): ln for ln in axes[0, 0].get_lines()}
    variant = lines["oracle restores=0"]
    assert variant.get_color() == "black" and variant.get_linestyle() != lines["oracle"].get_linestyle()


def test_a_repeated_policy_keeps_its_own_label_and_none_repeated_is_drawn():
    policies = ["none", "none#2", "oracle", "oracle#2", "last_n:n=5#2"]
    curves = {"src/t": {p: [1000, 900, 800] for p in policies}}
    fig, axes, legend = curves_figure(curves)
    labels = [ln.get_label() for ln in axes[0, 0].get_lines()]
    assert labels == ["none", "none#2", "oracle", "oracle#2", "last_n n=5#2"]
    rows = [*CROWDED, _row("oracle#2", 0, 0.05)]
    fig, ax, texts = pareto_figure(rows)
    assert {"oracle", "oracle#2"} <= {t.get_text() for t in texts}


@pytest.mark.parametrize(
    "label, family",
    [
        ("oracle", "oracle"),
        ("oracle:restores=0", "oracle"),
        ("oracle(restores=False)", "oracle"),
        ("oracle#2", "oracle"),
        ("oracle[1]", "oracle"),
        ("last_n:n=5", "last_n"),
        ("learned:path=runs/x,threshold=0.1", "learned"),
        ("oracle_like_rule", "oracle_like_rule"),
    ],
)
def test_one_reading_of_a_label_names_its_policy_for_plots_and_the_done_when_check(label, family):
    from dtoc_rl.policies.evaluate import _is_oracle

    assert policy_family(label) == family
    assert _is_oracle(label) == (family == "oracle")


def test_every_format_is_written_and_png_has_the_dpi(tmp_path):
    from PIL import Image

    for fmt, magic in (("png", b"\x89PNG"), ("pdf", b"%PDF"), ("svg", b"<?xml")):
        out = plot_token_curves({"t": {"none": [1, 2, 3]}}, tmp_path / f"c.{fmt}", dpi=150)
        assert out.read_bytes()[:5].startswith(magic), fmt
    plot_pareto(CROWDED, tmp_path / "p.png", dpi=150)
    assert Image.open(tmp_path / "p.png").info["dpi"] == pytest.approx((150, 150), abs=1)


def test_evaluate_writes_the_asked_format_and_refuses_a_bad_dpi(tmp_path, capsys):
    argv = ["evaluate", "-p", "none", "last_n:n=3", "--source", "tau-bench", "--quiet", "--bootstrap", "20",
            "--plots", str(tmp_path), "--plot-format", "svg"]  # fmt: skip
    assert main(argv) == 0
    assert (tmp_path / "pareto.svg").read_bytes().startswith(b"<?xml")
    assert (tmp_path / "curves.svg").is_file() and not (tmp_path / "pareto.png").exists()
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--dpi", "0"])
    assert stop.value.code == 2
    assert "argument --dpi: must be at least 1, got 0" in capsys.readouterr().err
