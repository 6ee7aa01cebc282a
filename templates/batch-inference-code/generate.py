"""Offline batch generation with vLLM over JSON-lines prompt shards, restartable.

Each *.jsonl shard under --prompts (one {"id", "prompt"} object per line) becomes one
<shard>.jsonl of {"id", "prompt", "output"} under --out. A shard is written to a temp
name and renamed when complete, and complete shards are skipped on restart, so a spot
preemption loses at most the shard in progress (the job's checkpoint dir is --out).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face model id or local path")
    p.add_argument("--prompts", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    return p.parse_args(argv)


def pending_shards(prompts: Path, out: Path) -> list[Path]:
    return [p for p in sorted(prompts.rglob("*.jsonl")) if not (out / p.name).exists()]


def read_prompts(shard: Path) -> list[dict[str, str]]:
    rows = []
    for n, line in enumerate(shard.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if "prompt" not in row:
                raise SystemExit(f"{shard}:{n}: expected a 'prompt' key")
            rows.append({"id": str(row.get("id", f"{shard.stem}-{n}")), "prompt": row["prompt"]})
    return rows


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shards = pending_shards(args.prompts, args.out)
    print(f"{len(shards)} shard(s) to generate", flush=True)
    if not shards:
        return
    from vllm import LLM, SamplingParams  # heavy: only when there is work

    llm = LLM(model=args.model, max_num_seqs=args.batch_size)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    for shard in shards:
        rows = read_prompts(shard)
        results = llm.generate([r["prompt"] for r in rows], params)
        tmp = args.out / f".{shard.name}.partial"
        with tmp.open("w", encoding="utf-8") as fh:
            for row, res in zip(rows, results, strict=True):
                fh.write(json.dumps({**row, "output": res.outputs[0].text}) + "\n")
        os.replace(tmp, args.out / shard.name)
        print(f"wrote {args.out / shard.name} ({len(rows)} prompts)", flush=True)


if __name__ == "__main__":
    main()
