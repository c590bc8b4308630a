"""Rebuild the bundled dataset ``data/sample`` from the raw sample logs in ``data/raw``.

    python -m scripts.build_sample

Run it whenever an ingester or the labeller changes; ``tests/test_sample.py``
fails while the committed dataset is stale.
"""

from __future__ import annotations

import argparse
import os
import sys

from dtoc_rl.cli import main as cli


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.build_sample", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the ingest summary as JSON")
    args = ap.parse_args(argv)
    from dtoc_rl.data.paths import bundled_dataset, bundled_raw

    # paths relative to the checkout, so that the committed card and summary name no machine's folders
    root = bundled_dataset().parents[1]
    raw, out = (os.path.relpath(p, root) for p in (bundled_raw(), bundled_dataset()))
    here = os.getcwd()
    os.chdir(root)
    try:
        argv = ["ingest", raw, "-o", out, "--overwrite", "--workers", "1"]
        return cli(argv + (["--json"] if args.json else ["--quiet"]))
    finally:
        os.chdir(here)


if __name__ == "__main__":
    sys.exit(main())
