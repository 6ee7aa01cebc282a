"""Full fine-tune of a causal language model on JSON-lines text, for `torchrun`.

Reads every *.jsonl file under --data (one object per line with "text", or "prompt" and
"response"), trains with Hugging Face Trainer (FSDP across the node's GPUs), saves
checkpoints under --resume-from so a preempted spot run continues where it stopped, and
writes the final model to --output/final. The sample data next to this file is tiny:
replace it (or point data: at s3://...) with your own.

    torchrun --nproc_per_node 8 train.py --model meta-llama/Meta-Llama-3.1-8B \
        --data $CLOUDGPU_NVME/data --output $CLOUDGPU_NVME/out \
        --resume-from $CLOUDGPU_NVME/out/ckpt
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face model id or local path")
    p.add_argument("--data", required=True, type=Path, help="folder of *.jsonl files")
    p.add_argument("--output", required=True, type=Path)
    p.add_argument("--resume-from", type=Path, help="checkpoint folder (kept across restarts)")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--save-steps", type=int, default=200)
    return p.parse_args(argv)


def read_texts(folder: Path) -> list[str]:
    texts = []
    for path in sorted(folder.rglob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "text" in row:
                texts.append(str(row["text"]))
            elif "prompt" in row and "response" in row:
                texts.append(f"{row['prompt']}\n{row['response']}")
            else:
                raise SystemExit(f"{path}:{n}: expected a 'text' or 'prompt'+'response' key")
    if not texts:
        raise SystemExit(f"no *.jsonl rows under {folder}")
    return texts


def last_checkpoint(folder: Path | None) -> str | None:
    if folder is None or not folder.is_dir():
        return None
    done = [p for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
    return str(max(done, key=lambda p: int(p.name.split("-")[1]))) if done else None


def main() -> None:
    args = parse_args()
    # Heavy imports after argument parsing, so `train.py --help` works anywhere.
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
    )

    tok = AutoTokenizer.from_pretrained(args.model)
    tok.pad_token = tok.pad_token or tok.eos_token
    enc = tok(read_texts(args.data), truncation=True, max_length=args.seq_len)
    rows = [{"input_ids": ids} for ids in enc["input_ids"]]
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype)
    ckpt_dir = args.resume_from or args.output / "ckpt"
    multi_gpu = int(os.environ.get("WORLD_SIZE", "1")) > 1
    training = TrainingArguments(
        output_dir=str(ckpt_dir),
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.grad_accum,
        num_train_epochs=args.epochs,
        learning_rate=args.lr,
        bf16=args.bf16,
        gradient_checkpointing=args.gradient_checkpointing,
        save_steps=args.save_steps,
        save_total_limit=2,
        logging_steps=10,
        report_to=[],
        fsdp="full_shard auto_wrap" if multi_gpu else "",
    )
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=rows,
        data_collator=DataCollatorForLanguageModeling(tok, mlm=False),
    )
    trainer.train(resume_from_checkpoint=last_checkpoint(ckpt_dir))
    final = args.output / "final"
    trainer.save_model(str(final))
    tok.save_pretrained(str(final))
    print(f"saved {final}", flush=True)


if __name__ == "__main__":
    main()
