"""`dtoc-rl stats` reads a dataset in one pass and keeps numbers, not runs: a dataset of tens of
thousands of runs is summarised in the memory of a few of them."""

import gc
import json
import weakref

import dtoc_rl.cli.tables as tables
from dtoc_rl.cli import main as cli
from dtoc_rl.data.dataset import load_trajectories
from dtoc_rl.data.paths import bundled_dataset
from dtoc_rl.data.schema import Trajectory
from dtoc_rl.ingest.driver import summarize


def test_stats_keeps_no_run_once_read(tmp_path, monkeypatch, capsys):
    made: list[weakref.ref] = []
    from_row = Trajectory.from_row.__func__

    def spy(cls, row):
        t = from_row(cls, row)
        made.append(weakref.ref(t))
        return t

    monkeypatch.setattr(Trajectory, "from_row", classmethod(spy))
    alive_at_print: list[int] = []
    shown = tables.print_summary

    def count_then_print(summary, title, *a, **kw):
        gc.collect()
        alive_at_print.append(sum(r() is not None for r in made))
        return shown(summary, title, *a, **kw)

    monkeypatch.setattr(tables, "print_summary", count_then_print)
    assert cli(["stats", str(bundled_dataset()), "--plot", str(tmp_path / "s.png")]) == 0
    n = len(load_trajectories(bundled_dataset()))
    assert len(made) >= n > 10 and (tmp_path / "s.png").is_file()
    assert f"({n} trajectories)" in capsys.readouterr().out
    assert alive_at_print == [0]  # every run read was let go (they were all held before)


def test_the_streamed_summary_and_plot_data_are_those_of_the_whole_list(tmp_path, capsys):
    from dtoc_rl.cli.stats import Distributions, plot_distributions

    trajs = load_trajectories(bundled_dataset())
    dist = Distributions()
    assert summarize(dist.feed(iter(trajs))) == summarize(trajs)
    assert dist.n == len(trajs) and dist.steps == [len(t.steps) for t in trajs]
    assert dist.ages == [s.index - n.step for t in trajs for s in t.steps for n in s.needs]
    plot_distributions(dist, tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 1000
    assert cli(["stats", str(bundled_dataset()), "--no-plot", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"] == summarize(trajs)["total"]
