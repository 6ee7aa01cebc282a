"""Convert the dated SkyPilot catalog tables into cloudgpu's bundled offer snapshots.

    python -m tools.convert_prices SOURCE_DIR [--out cloudgpu/catalog/data]
        [--aws-instance-types PATH]

SOURCE_DIR holds aws.csv, gcp.csv, azure.csv, runpod.csv, lambda.csv, vast.csv (row
subsets of github.com/skypilot-org/skypilot-catalog; see their SOURCE.md). Each output
file keeps the source repository, path, commit and extraction date, and counts every
row it skipped by reason. The project reads only the output files, never SOURCE_DIR.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from cloudgpu.catalog import snapshot
from cloudgpu.catalog.catalog import SNAPSHOT_DIR, snapshot_path
from cloudgpu.catalog.gpus import load_registry
from tools.convert import aws, azure, gcp, others
from tools.convert.common import EXTRACTED, OBSERVED_AT, REPO, Context

# provider -> (source path in the repo, commit as reported in SOURCE.md)
ORIGINS: dict[str, tuple[str, str]] = {
    "aws": ("catalogs/v7/aws/vms.csv", "001367d22a0033fac286a8c71aeac7109e431bcb"),
    "gcp": ("catalogs/v7/gcp/vms.csv", "017e2502fb63c7a28757acd94002b2d6099d3e3d"),
    "azure": ("catalogs/v6/azure/vms.csv", "098741e70562f65d7af1cceb81e33b284f742604"),
    "runpod": ("catalogs/v7/runpod/vms.csv", "0727c2bd9e77f91cb1377127c5f793a28cf01384"),
    "lambda": ("catalogs/v7/lambda/vms.csv", "11580132cea293395776b033c8533714d42abb4e"),
    "vast": ("catalogs/v7/vast/vms.csv", "00690e7666c721997de53f0594aef3d86d560545"),
}


def default_instance_types() -> Path:
    """AWS DescribeInstanceTypes data as moto ships it (a dev dependency)."""
    import moto  # a dev tool's lazy import: moto is only needed to convert AWS

    return Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"


def convert_provider(provider: str, source_dir: Path, aws_types: Path | None) -> Context:
    _path, commit = ORIGINS[provider]
    ctx = Context(
        provider=provider,
        registry=load_registry(),
        price_source=f"snapshot:skypilot-catalog@{commit[:7]}",
    )
    csv_path = source_dir / f"{provider}.csv"
    runners: dict[str, Callable[[], None]] = {
        "aws": lambda: aws.convert(
            ctx, csv_path, aws.load_instance_types(aws_types or default_instance_types())
        ),
        "gcp": lambda: gcp.convert(ctx, csv_path),
        "azure": lambda: azure.convert(ctx, csv_path),
        "runpod": lambda: others.convert_runpod(ctx, csv_path),
        "lambda": lambda: others.convert_lambda(ctx, csv_path),
        "vast": lambda: others.convert_vast(ctx, csv_path),
    }
    runners[provider]()
    return ctx


def write_snapshot(ctx: Context, out_dir: Path) -> Path:
    path, commit = ORIGINS[ctx.provider]
    origin = {"repo": REPO, "path": path, "commit": commit, "extracted": EXTRACTED}
    if ctx.notes:
        origin["notes"] = "; ".join(dict.fromkeys(ctx.notes))
    skipped = dict(sorted(ctx.skipped.items()))
    for name, n in sorted(ctx.unknown_gpus.items()):
        skipped[f"kept, flagged unknown_gpu: '{name}'"] = n
    data = snapshot.OfferFile(
        provider=ctx.provider,
        source=f"{REPO} {path}@{commit[:7]} (extracted {EXTRACTED})",
        observed_at=OBSERVED_AT,
        offers=ctx.offers,
        origin=origin,
        skipped=skipped,
        price_source=ctx.price_source,
    )
    target = snapshot_path(ctx.provider, out_dir)
    snapshot.write(target, data)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source_dir", type=Path, help="folder with aws.csv, gcp.csv, ...")
    ap.add_argument("--out", type=Path, default=SNAPSHOT_DIR)
    ap.add_argument("--aws-instance-types", type=Path, default=None)
    ap.add_argument("--provider", action="append", choices=sorted(ORIGINS))
    args = ap.parse_args(argv)
    missing = [p for p in args.provider or ORIGINS if not (args.source_dir / f"{p}.csv").is_file()]
    if missing:
        print(
            f"error: {args.source_dir}: missing {', '.join(m + '.csv' for m in missing)}",
            file=sys.stderr,
        )
        return 2
    for provider in args.provider or ORIGINS:
        ctx = convert_provider(provider, args.source_dir, args.aws_instance_types)
        target = write_snapshot(ctx, args.out)
        skipped = sum(ctx.skipped.values())
        print(
            f"{provider:7} {len(ctx.offers):6} offers -> {target}  ({skipped} rows/prices skipped)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
