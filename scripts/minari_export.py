"""Export ReplayEnv episodes under a policy as a Minari dataset (the standard offline-RL format).

    python -m scripts.minari_export --dataset-id dtoc_rl/replay-oracle-v0 --policy oracle --out minari_data
    python -m scripts.minari_export --dataset-id dtoc_rl/replayflat-last5-v0 --policy last_n:n=5 --flat

Every trajectory of --dataset (default: the bundled sample) is replayed once, in order, under
--policy (any spec `dtoc-rl evaluate` takes, including module:Class), and written with Minari's
Arrow storage under --out (default: MINARI_DATASETS_PATH, else ~/.minari/datasets).  Load it with
``minari.load_dataset(ID)`` (with MINARI_DATASETS_PATH set to --out).  Needs
``pip install 'dtoc-rl[minari]'``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from dtoc_rl.cli.common import at_least

#: Minari's id form with the version it needs to write a dataset (its own regex leaves it optional).
_DATASET_ID = re.compile(r"(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+?-v\d+")


def dataset_id(text: str) -> str:
    """An argparse ``type``: a Minari dataset id, ``namespace/name-vN`` (the namespace may be left out)."""
    if not _DATASET_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected namespace/name-vN (e.g. dtoc_rl/replay-v0; the namespace may be left out), "
            f"got {text!r}"
        )
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scripts.minari_export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--dataset-id",
        type=dataset_id,
        required=True,
        help="Minari id, namespace/name-vN (e.g. dtoc_rl/replay-v0)",
    )
    p.add_argument(
        "--policy", default="none", help="policy spec whose decisions are recorded (default: none)"
    )
    p.add_argument("--dataset", help="dataset folder from `dtoc-rl ingest` (default: the bundled sample)")
    p.add_argument(
        "--out", help="folder to write into (default: MINARI_DATASETS_PATH, else ~/.minari/datasets)"
    )
    p.add_argument(
        "--flat",
        action="store_true",
        help="record dtoc_rl/ReplayFlat-v0's spaces (one visible bit per slot) instead of ReplayEnv's",
    )
    p.add_argument("--episodes", type=at_least(1), help="replay only the first N trajectories")
    p.add_argument("--max-items", type=at_least(1), help="env slots (default: the env's)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dtoc_rl.data.dataset import DatasetError
    from dtoc_rl.policies.export import export_minari

    kw = {} if args.max_items is None else {"max_items": args.max_items}
    try:
        out = export_minari(
            args.dataset_id, args.policy, dataset=args.dataset, out_dir=args.out, flat=args.flat,
            episodes=args.episodes, **kw,
        )  # fmt: skip
    except (DatasetError, ImportError, FileExistsError, ValueError, TypeError) as e:
        msg = str(e).strip().splitlines()
        print(f"error: {msg[0] if msg else type(e).__name__}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"wrote {out['episodes']} episodes ({out['steps']} steps) under {out['policy']} "
            f"to {out['path']}; mean return {out['mean_return']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
