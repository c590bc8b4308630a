"""Rebuild the bundled dataset ``data/sample`` from the raw sample logs in ``data/raw``.

    python -m scripts.build_sample

Run it whenever an ingester or the labeller changes; ``tests/test_sample.py``
fails while the committed dataset is stale.
"""

from __future__ import annotations

import argparse
import sys

from dtoc_rl.cli import main as cli


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the ingest summary as JSON")
    args = ap.parse_args()
    from dtoc_rl.data.paths import bundled_dataset, bundled_raw

    argv = ["ingest", str(bundled_raw()), "-o", str(bundled_dataset()), "--overwrite", "--workers", "1"]
    return cli(argv + (["--json"] if args.json else ["--quiet"]))


if __name__ == "__main__":
    sys.exit(main())
