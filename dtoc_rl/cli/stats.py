"""``dtoc-rl stats DATASET``: the ingest summary of an existing dataset, and a
PNG of its distributions (steps per trajectory, output tokens per step, need
age in steps, need kinds).

What it is for: before training or evaluating on logs, to see what they hold:
how many runs of which harness and model, how long they are, how large their
outputs and prompts are (the regime decides which policies can save: short
runs with small outputs leave little to hide), and how often and how late an
output is needed again (a late need is what a hiding policy risks missing)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dtoc_rl.cli.common import emit_json, fail


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.replace("``", "'")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("dataset", type=Path, help="a dataset folder written by `dtoc-rl ingest`")
    p.add_argument(
        "--plot", type=Path, help="PNG path (default: DATASET_NAME-stats.png in the current folder)"
    )
    p.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (stats draws none; taken so that every command accepts the same flag)",
    )


def run(args: argparse.Namespace) -> int:
    from dtoc_rl.data.dataset import DatasetError, iter_trajectories
    from dtoc_rl.ingest.driver import summarize

    dist = Distributions()
    try:
        # one pass over the shards, a few rows at a time: the summary and the plot keep the numbers they
        # draw, not the runs (a dataset of tens of thousands of runs does not fit in memory as objects)
        summary = summarize(dist.feed(iter_trajectories(args.dataset)))
    except DatasetError as e:
        return fail(str(e))
    summary["dataset"] = str(args.dataset)
    if not args.no_plot:
        out = args.plot or Path(f"{args.dataset.resolve().name}-stats.png")
        plot_distributions(dist, out)
        summary["plot"] = str(out)
    if args.json:
        emit_json(summary)
    else:
        from dtoc_rl.cli.tables import print_summary

        print_summary(summary, f"dataset {args.dataset} ({dist.n} trajectories)")
        if "plot" in summary:
            print(f"distributions plotted to {summary['plot']}")
    return 0


class Distributions:
    """What the stats plot draws, gathered run by run: steps per trajectory, output tokens per step,
    need ages and need kinds (the runs themselves are not kept)."""

    def __init__(self) -> None:
        self.n = 0
        self.steps: list[int] = []
        self.toks: list[int] = []
        self.ages: list[int] = []
        self.kinds: dict[str, int] = {}

    def add(self, t) -> None:
        self.n += 1
        self.steps.append(len(t.steps))
        for s in t.steps:
            if s.output is not None:
                self.toks.append(s.output_tokens)
            for n in s.needs:
                self.ages.append(s.index - n.step)
                self.kinds[n.kind] = self.kinds.get(n.kind, 0) + 1

    def feed(self, trajs):
        """``trajs`` again, each added on its way."""
        for t in trajs:
            self.add(t)
            yield t


def plot_distributions(dist: Distributions, out: Path) -> None:
    """The PNG of the distributions of a dataset's runs (gathered as they were read)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    steps, toks, ages, kinds = dist.steps, dist.toks, dist.ages, dist.kinds
    fig, ax = plt.subplots(2, 2, figsize=(10, 7))
    ax[0, 0].hist(steps, bins=30)
    ax[0, 0].set(title="steps per trajectory", xlabel="steps", ylabel="trajectories")
    if toks:
        ax[0, 1].hist(np.log10(np.maximum(toks, 1)), bins=40)
    ax[0, 1].set(title="output tokens per step", xlabel="log10 tokens", ylabel="outputs")
    if ages:
        ax[1, 0].hist(ages, bins=range(1, max(ages) + 2))
    ax[1, 0].set(title="need age", xlabel="steps back", ylabel="needs")
    ax[1, 1].bar(list(kinds), list(kinds.values()))
    ax[1, 1].set(title="need kinds", ylabel="needs")
    fig.suptitle(f"{dist.n} trajectories")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
