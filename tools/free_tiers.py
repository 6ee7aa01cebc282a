"""Write the free tiers' bundled offer files from the providers' own rows.

    python -m tools.free_tiers [--out cloudgpu/catalog/data]

Kaggle's and Colab's free GPU rows (and their session/quota limits) are defined by
their providers (providers/kaggle/tiers.py, providers/colab/provider.py); the catalog
bundles a copy so `offers --free`, `plan` and buy-vs-rent see them without importing a
plugin. tests/catalog/test_free_tiers.py fails when the copy and the providers differ.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cloudgpu_providers.colab import provider as colab
from cloudgpu_providers.kaggle import tiers as kaggle

from cloudgpu.catalog import snapshot
from cloudgpu.catalog.catalog import SNAPSHOT_DIR, snapshot_path

FILES = (kaggle.offer_file, colab.offer_file)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SNAPSHOT_DIR)
    args = parser.parse_args(argv)
    for make in FILES:
        data = make()
        snapshot.write(snapshot_path(data.provider, args.out), data)
        print(f"{data.provider}: {len(data.offers)} free-tier offer(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
