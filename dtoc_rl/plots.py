"""Plots people look at instead of reading tables (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_cross_model", "plot_pareto", "plot_token_curves"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, dpi: int = 200) -> Path:
    """Save in the format the suffix names (png, pdf, svg); ``dpi`` matters for png only."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    fig.clf()
    return out


def _short(label: str) -> str:
    """``learned:path=runs/x/policy,threshold=0.1`` → ``learned t=0.1`` for legends."""
    import re

    return re.sub(
        r"learned:path=[^,]*(,threshold=)?", lambda m: "learned t=" if m.group(1) else "learned", label
    )


def _family(label: str) -> str:
    return label.split(":")[0].split("(")[0].split("[")[0]


def plot_pareto(
    rows: Sequence[dict[str, Any]],
    out: Path,
    title: str = "",
    group: tuple[str, str] | None = None,
    dpi: int = 200,
) -> Path:
    """Dollar savings (y) against misses per 100 steps (x), one point per policy,
    lines joining parameter sweeps of the same policy, 95% CIs as error bars.

    ``group`` picks the rows, e.g. ``("split", "held-out")``; by default the held-out split when the
    rows have one (a learned policy is judged on tasks it did not train on), else ``overall``."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    if group is None:
        held = any(r["group_by"] == "split" and r["group"] == "held-out" for r in rows)
        group = ("split", "held-out") if held else ("overall", "all")
    overall = [r for r in rows if r["group_by"] == group[0] and r["group"] == group[1]]
    title = title or f"Savings against misses ({group[1] if group[0] != 'overall' else 'all trajectories'})"
    by_family: dict[str, list] = {}
    for r in overall:
        by_family.setdefault(_family(r["policy"]), []).append(r)
    for fam, rs in by_family.items():
        rs = sorted(rs, key=lambda r: r["misses_per_100"])
        xs = [r["misses_per_100"] for r in rs]
        ys = [100 * r["savings"] for r in rs]
        yerr = [
            [100 * (r["savings"] - r["savings_lo"]) for r in rs],
            [100 * (r["savings_hi"] - r["savings"]) for r in rs],
        ]
        xerr = [[r["misses_per_100"] - r["misses_per_100_lo"] for r in rs],
                [r["misses_per_100_hi"] - r["misses_per_100"] for r in rs]]  # fmt: skip
        ax.errorbar(
            xs,
            ys,
            xerr=xerr,
            yerr=yerr,
            marker="o",
            capsize=3,
            label=fam,
            linestyle="-" if len(rs) > 1 else "",
        )
        for r, x, y in zip(rs, xs, ys):
            if len(rs) > 1:
                ax.annotate(
                    r["policy"].split(":", 1)[-1].split(",")[-1],
                    (x, y),
                    fontsize=7,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("misses per 100 steps (lower is better)")
    ax.set_ylabel("dollar savings vs. no management, % (higher is better)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, out, dpi)


def plot_token_curves(curves: dict[str, dict[str, list[int]]], out: Path, dpi: int = 200) -> Path:
    """Active tokens at each call, per sample trajectory, all policies overlaid."""
    plt = _plt()
    n = max(1, len(curves))
    fig, axes = plt.subplots(n, 1, figsize=(9, 3.2 * n), squeeze=False)
    colors = plt.cm.tab20.colors
    for ax, (tid, per_policy) in zip(axes[:, 0], curves.items()):
        for i, (label, ys) in enumerate(per_policy.items()):
            style = (
                {"color": "black", "lw": 2.0} if label == "oracle" else {"color": colors[i % 20], "lw": 1.1}
            )
            if label == "none":
                style = {"color": "grey", "lw": 2.0, "ls": "--"}
            ax.plot(ys, label=_short(label), **style)
        ax.set_title(tid, fontsize=9)
        ax.set_xlabel("call")
        ax.set_ylabel("active tokens")
    axes[0, 0].legend(fontsize=7, ncol=2)
    return _save(fig, out, dpi)


def plot_cross_model(matrix: dict[str, dict[str, float]], out: Path, metric: str = "savings") -> Path:
    """Heatmap: policy trained on family A (rows) evaluated on family B (columns)."""
    plt = _plt()
    rows = list(matrix)
    cols = sorted({c for r in matrix.values() for c in r})
    import numpy as np

    data = np.array([[matrix[r].get(c, np.nan) for c in cols] for r in rows], float)
    fig, ax = plt.subplots(figsize=(1.4 * len(cols) + 3, 0.7 * len(rows) + 2))
    im = ax.imshow(100 * data, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isfinite(data[i, j]):
                ax.text(j, i, f"{100 * data[i, j]:.1f}", ha="center", va="center", fontsize=8)
    ax.set_xlabel("evaluated on family")
    ax.set_ylabel("trained on family")
    ax.set_title(f"cross-model {metric} (%)")
    fig.colorbar(im, ax=ax)
    return _save(fig, out)
