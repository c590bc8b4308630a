"""Plots people look at instead of reading tables (matplotlib, Agg backend)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "curves_figure",
    "pareto_figure",
    "plot_cross_model",
    "plot_pareto",
    "plot_token_curves",
    "policy_family",
]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, dpi: int = 200, tight: bool = True) -> Path:
    """Save in the format the suffix names (png, pdf, svg); ``dpi`` matters for png only."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if tight:
        fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    _plt().close(fig)
    return out


def _short(label: str) -> str:
    """``learned:path=runs/x/policy,threshold=0.1`` → ``learned t=0.1`` for legends."""
    return re.sub(
        r"learned:path=[^,]*(,threshold=)?", lambda m: "learned t=" if m.group(1) else "learned", label
    )


def policy_family(label: str) -> str:
    """The policy a spec or row label names, without its settings: ``oracle`` for ``oracle:restores=0``,
    ``oracle(restores=False)``, ``oracle[2]`` and ``oracle#2`` (a label made unique in a table)."""
    return re.split(r"[:(\[#]", label, maxsplit=1)[0]


def _human(v: str) -> str:
    try:
        x = float(v)
    except ValueError:
        return v
    return f"{x / 1000:g}k" if abs(x) >= 1000 and x % 100 == 0 else v


def _point_label(policy: str) -> str:
    """A short, unambiguous label: ``last_n:n=5`` → ``last_n n=5``, ``budget:budget=8000`` → ``budget 8k``;
    the ``#2`` that makes a repeated policy's label unique is kept (``oracle#2``)."""
    m = re.search(r"#\d+$", policy)
    if m:
        return _point_label(policy[: m.start()]) + m.group(0)
    fam = policy_family(policy)
    if fam == "learned" or policy.startswith("learned:"):
        return _short(policy)
    _, _, params = policy.partition(":")
    parts = []
    for kv in filter(None, params.split(",")):
        k, eq, v = kv.partition("=")
        if not eq:
            parts.append(kv)
        elif k == fam:
            parts.append(_human(v))
        else:
            parts.append(f"{k.replace('attention_window', 'window')}={_human(v)}")
    return (
        " ".join([fam, *parts])
        if fam in ("last_n", "budget", "obs_mask", "anthropic_clear") or parts
        else fam
    )


def _palette(plt) -> list:
    """tab10 without its red and grey: crimson marks the learned policy, grey no management."""
    return [c for i, c in enumerate(plt.cm.tab10.colors) if i not in (3, 7)]


def _is_learned(policy: str) -> bool:
    return policy_family(policy) == "learned" or "/" in policy.split(":")[0] or policy.startswith("learned")


# candidate label offsets (points): close first, then further out, in sixteen directions
_ANGLES = (30, 150, -30, -150, 0, 180, 60, 120, -60, -120, 90, -90, 15, 165, -15, -165)
_RADII = (6, 14, 24, 36, 50, 66, 84, 104)


def _obstacle_points(ax, step_px: float = 3.0):
    """Pixel points along every drawn line (data lines, error bars, caps): labels avoid covering them."""
    import numpy as np

    segs = []
    for line in ax.get_lines():
        xy = np.asarray(line.get_xydata(), float)
        if len(xy):
            segs.append(ax.transData.transform(xy))
    for coll in ax.collections:
        for seg in getattr(coll, "get_segments", lambda: [])():
            if len(seg):
                segs.append(ax.transData.transform(np.asarray(seg, float)))
    pts = []
    for s in segs:
        s = s[np.isfinite(s).all(axis=1)]
        pts.append(s)
        for a, b in zip(s[:-1], s[1:]):
            n = int(np.hypot(*(b - a)) // step_px)
            if n > 1:
                t = np.linspace(0, 1, n)[1:-1, None]
                pts.append(a + t * (b - a))
    return np.concatenate(pts) if pts else np.zeros((0, 2))


def _place_labels(fig, ax, points: list[tuple[float, float, str, dict]]) -> list:
    """Annotate each (x, y, text, style) so that no two labels overlap and each stays in the axes.

    Greedy, in list order (the priority): each label tries rings of growing radius around its
    point and takes the spot that overlaps no placed label and stays inside the axes, preferring
    spots close to the point that cover fewer markers and lines; a label placed away from its
    point gets a thin leader line."""
    import math

    import numpy as np

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axbox = ax.get_window_extent(renderer)
    px = np.array([ax.transData.transform((x, y)) for x, y, _, _ in points]).reshape(-1, 2)
    lines = _obstacle_points(ax)
    pt = fig.dpi / 72  # pixels per point
    marker_r = 4.0 * pt
    taken: list[tuple[float, float, float, float]] = []
    labels = []

    def area(b, o) -> float:
        return max(0.0, min(b[2], o[2]) - max(b[0], o[0])) * max(0.0, min(b[3], o[3]) - max(b[1], o[1]))

    for (x, y, text, style), (u, v) in zip(points, px):
        probe = ax.text(0, 0, text, fontsize=7, **style)  # its size; the offsets only move it
        size = probe.get_window_extent(renderer)
        w, h = size.width, size.height
        probe.remove()
        best = None
        for r in _RADII:
            for a in _ANGLES:
                dx, dy = r * math.cos(math.radians(a)), r * math.sin(math.radians(a))
                ha = "left" if dx > 1 else "right" if dx < -1 else "center"
                va = "bottom" if dy > 1 else "top" if dy < -1 else "center"
                ox, oy = u + dx * pt, v + dy * pt
                x0 = ox if ha == "left" else ox - w if ha == "right" else ox - w / 2
                y0 = oy if va == "bottom" else oy - h if va == "top" else oy - h / 2
                b = (x0 - 1.5, y0 - 1.5, x0 + w + 1.5, y0 + h + 1.5)
                inside = b[0] >= axbox.x0 and b[2] <= axbox.x1 and b[1] >= axbox.y0 and b[3] <= axbox.y1
                free = all(area(b, o) == 0 for o in taken)
                # soft: markers covered (own one included), line pixels covered, distance
                near = (px[:, 0] + marker_r >= b[0]) & (px[:, 0] - marker_r <= b[2])
                near &= (px[:, 1] + marker_r >= b[1]) & (px[:, 1] - marker_r <= b[3])
                hit = 0
                if len(lines):
                    hit = int(((lines[:, 0] >= b[0]) & (lines[:, 0] <= b[2])
                               & (lines[:, 1] >= b[1]) & (lines[:, 1] <= b[3])).sum())  # fmt: skip
                soft = 400.0 * int(near.sum()) + 25.0 * hit + 3.0 * r
                cost = (0 if inside and free else 1e9) + soft
                if best is None or cost < best[0]:
                    best = (cost, (dx, dy), ha, va, b, r)
        assert best is not None
        _, xytext, ha, va, b, r = best
        kw = {}
        if r > _RADII[1]:  # away from its point: a leader line says whose label it is
            kw["arrowprops"] = {"arrowstyle": "-", "lw": 0.5, "color": "0.55", "shrinkA": 0, "shrinkB": 3}
        ann = ax.annotate(text, (x, y), xytext=xytext, textcoords="offset points", ha=ha, va=va,
                          fontsize=7, zorder=6, **kw, **style)  # fmt: skip
        taken.append(b)
        labels.append(ann)
    return labels


def pareto_figure(
    rows: Sequence[dict[str, Any]],
    title: str = "",
    group: tuple[str, str] | None = None,
):
    """The Pareto chart as ``(fig, ax, labels)``; :func:`plot_pareto` saves it."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    if group is None:
        held = any(r["group_by"] == "split" and r["group"] == "held-out" for r in rows)
        group = ("split", "held-out") if held else ("overall", "all")
    overall = [r for r in rows if r["group_by"] == group[0] and r["group"] == group[1]]
    title = title or f"Savings against misses ({group[1] if group[0] != 'overall' else 'all trajectories'})"
    by_family: dict[str, list] = {}
    for r in overall:
        key = "learned" if _is_learned(r["policy"]) else policy_family(r["policy"])
        if key == "oracle" and r["policy"] != "oracle":  # a hindsight variant: a point of its own
            key = r["policy"]
        by_family.setdefault(key, []).append(r)
    colors = _palette(plt)
    others = [f for f in by_family if f not in ("learned", "none") and policy_family(f) != "oracle"]
    points = []  # (x, y, label, style, priority)
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
        if fam == "learned":  # the policy the reader came for: on top of everything, never hidden
            style = {"color": "crimson", "marker": "D", "ms": 7, "zorder": 5, "mec": "black", "mew": 0.8}
        elif fam == "oracle":
            style = {"color": "black", "marker": "*", "ms": 11, "zorder": 4}
        elif policy_family(fam) == "oracle":  # a hindsight variant: the oracle's star, hollow
            style = {"color": "black", "marker": "*", "ms": 11, "mfc": "none", "zorder": 4}
        elif fam == "none":
            style = {"color": "grey", "marker": "s", "ms": 6, "zorder": 3}
        else:
            style = {"color": colors[others.index(fam) % len(colors)], "marker": "o", "ms": 5, "zorder": 3}
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, capsize=2.5, elinewidth=0.8, label=fam,
                    linestyle="-" if len(rs) > 1 else "", lw=1.0, **style)  # fmt: skip
        rank = {"learned": 0, "oracle": 1, "none": 2}.get(policy_family(fam), 3)
        for r, x, y in zip(rs, xs, ys):
            points.append((x, y, _point_label(r["policy"]), {"color": style["color"]}, rank))
    ax.axhline(0, color="grey", lw=0.6, zorder=1)
    ax.set_xlabel("misses per 100 steps (lower is better)")
    ax.set_ylabel("dollar savings vs. no management, % (higher is better)")
    ax.set_title(title)
    # room for labels around the extreme points: 12% of the data span on each side
    ax.margins(x=0.12, y=0.12)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    fig.tight_layout()
    points.sort(key=lambda p: p[4])
    labels = _place_labels(fig, ax, [p[:4] for p in points])
    return fig, ax, labels


def plot_pareto(
    rows: Sequence[dict[str, Any]],
    out: Path,
    title: str = "",
    group: tuple[str, str] | None = None,
    dpi: int = 200,
) -> Path:
    """Dollar savings (y) against misses per 100 steps (x), one labelled point per policy, lines
    joining parameter sweeps of the same policy, 95% CIs as error bars; the learned policy is drawn
    last, on top.  The file format follows ``out``'s suffix (png, pdf, svg).

    ``group`` picks the rows, e.g. ``("split", "held-out")``; by default the held-out split when the
    rows have one (a learned policy is judged on tasks it did not train on), else ``overall``."""
    fig, _, _ = pareto_figure(rows, title, group)
    return _save(fig, out, dpi, tight=False)


def curves_figure(curves: dict[str, dict[str, list[int]]]):
    """The token-curve figure as ``(fig, axes, legend)``; :func:`plot_token_curves` saves it."""
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    n = max(1, len(curves))
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.8 * n + 1.2), squeeze=False)
    labels = list(dict.fromkeys(label for per in curves.values() for label in per))
    fams = [policy_family(lb) for lb in labels]
    fams = list(dict.fromkeys(f for f in fams if f not in ("oracle", "none")))
    fams = [f for f in fams if not any(_is_learned(lb) and policy_family(lb) == f for lb in labels)] or fams
    colors = _palette(plt)
    dashes = ["-", "--", ":", "-."]
    seen: dict[str, int] = {}
    styles = {}
    for lb in labels:  # one colour per policy family, one line style per member of a sweep
        fam = policy_family(lb)
        k = seen[fam] = seen.get(fam, -1) + 1
        if lb == "oracle":
            styles[lb] = {"color": "black", "lw": 2.0, "zorder": 4}
        elif fam == "oracle":  # a hindsight variant (oracle:restores=0): the reference's colour, dashed
            styles[lb] = {"color": "black", "lw": 1.4, "ls": dashes[1 + k % 3], "zorder": 4}
        elif fam == "none":  # "none", or a repeat of it ("none#2")
            # a wide pale band under everything: policies that change nothing run inside it, visibly
            styles[lb] = {"color": "0.6", "lw": 5.0, "alpha": 0.45, "zorder": 1, "solid_capstyle": "butt"}
        elif _is_learned(lb):
            styles[lb] = {"color": "crimson", "lw": 1.6, "ls": dashes[k % len(dashes)], "zorder": 5}
        else:
            styles[lb] = {"color": colors[fams.index(fam) % len(colors)], "lw": 1.1,
                          "ls": dashes[k % len(dashes)], "zorder": 3}  # fmt: skip
    handles = {}
    for ax, (tid, per_policy) in zip(axes[:, 0], curves.items()):
        for label, ys in per_policy.items():
            (line,) = ax.plot(range(1, len(ys) + 1), ys, label=_point_label(label), **styles[label])
            handles.setdefault(label, line)
        ax.set_title(tid, fontsize=9)
        ax.set_ylabel("active tokens")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # calls are counted, not measured
        ax.yaxis.set_major_formatter(
            plt.FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}")
        )
        ax.margins(x=0.01)
    axes[-1, 0].set_xlabel("model call")
    ncol = min(5, max(1, len(handles)))
    legend = fig.legend(
        list(handles.values()),
        [_point_label(lb) for lb in handles],
        loc="lower center",
        ncol=ncol,
        fontsize=7.5,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )
    fig.canvas.draw()
    height = legend.get_window_extent(fig.canvas.get_renderer()).height / fig.bbox.height
    fig.tight_layout(rect=(0, height + 0.01, 1, 1))  # the panels end where the legend starts
    return fig, axes, legend


def plot_token_curves(curves: dict[str, dict[str, list[int]]], out: Path, dpi: int = 200) -> Path:
    """Active tokens at each model call, per sample trajectory, all policies overlaid; one legend
    below the panels (never over the data).  The file format follows ``out``'s suffix."""
    fig, _, _ = curves_figure(curves)
    return _save(fig, out, dpi, tight=False)


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
