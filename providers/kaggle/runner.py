"""The script a Kaggle kernel runs for one cloudgpu job (standard library only).

provider.py sends this file's text as the kernel's source, followed by one line that
calls :func:`main` with the job's spec (base64 JSON). Inside the kernel it:

1. puts each data item where the job expects it: a Kaggle dataset mounted under
   /kaggle/input is copied; a local folder the client uploaded as a private dataset
   arrives as one tar file and is unpacked (members that would land outside the
   destination, links and devices are refused);
2. restores the checkpoint of an earlier session (this kernel's previous output, mounted
   under /kaggle/input/<slug>) when there is one;
3. runs ``setup`` then ``run`` with ``sh -c``, with the job's env plus CLOUDGPU_*; output
   goes to the kernel log; the run is stopped a few minutes before the session limit so
   the checkpoint can still be saved;
4. copies each declared output tree and the checkpoint into /kaggle/working (what Kaggle
   keeps as the kernel's output) and writes cloudgpu-result.json with the exit status.

It always exits 0 itself: the result file carries the job's status, and Kaggle saves a
kernel's output only when the kernel ends normally. ``CLOUDGPU_KAGGLE_ROOT`` (default
/kaggle) exists for the test server, which runs this script on its own files.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

RESULT = "cloudgpu-result.json"
OUTPUTS = "cloudgpu-outputs"
CHECKPOINT = "cloudgpu-checkpoint"
MARGIN_S = 600  # at most this long before the session limit the run is stopped


def _root() -> Path:
    return Path(os.environ.get("CLOUDGPU_KAGGLE_ROOT", "/kaggle"))


def _at(path: str) -> str:
    """A /kaggle path under the root actually in use (the same path on Kaggle)."""
    if path == "/kaggle" or path.startswith("/kaggle/"):
        return str(_root()) + path[len("/kaggle") :]
    return path


def _say(text: str) -> None:
    print(f"[cloudgpu] {text}", flush=True)


def _find_input(inputs: Path, ref: str) -> Path | None:
    """A mounted source ``owner/slug``: /kaggle/input/<slug>, or the newer
    /kaggle/input/datasets/<owner>/<slug> layout."""
    owner, _, slug = ref.partition("/")
    for cand in (inputs / slug, inputs / "datasets" / owner / slug, inputs / owner / slug):
        if cand.is_dir():
            return cand
    return None


def _safe_extract(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            target = (root / member.name).resolve()
            if not (member.isfile() or member.isdir()) or (
                target != root and root not in target.parents
            ):
                raise SystemExit(f"[cloudgpu] refusing archive member {member.name!r}")
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.10.12
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)  # every member was checked above


def stage(spec: dict[str, Any], inputs: Path) -> None:
    for item in spec.get("data", []):
        dst = Path(_at(item["dst"]))
        if item["kind"] == "upload":
            mount = _find_input(inputs, item["dataset"])
            if mount is None or not (mount / item["file"]).is_file():
                raise SystemExit(f"[cloudgpu] uploaded data {item['dataset']} is not mounted")
            _safe_extract(mount / item["file"], dst)
        else:
            mount = _find_input(inputs, item["dataset"])
            if mount is None:
                raise SystemExit(f"[cloudgpu] dataset {item['dataset']} is not mounted")
            shutil.copytree(mount, dst, symlinks=True, dirs_exist_ok=True)
        _say(f"data {item['dataset']} -> {dst}")


def restore_checkpoint(spec: dict[str, Any], inputs: Path) -> None:
    ckpt, previous = _at(spec.get("checkpoint") or ""), spec.get("resume_from")
    if not ckpt or not previous:
        return
    mount = _find_input(inputs, previous)
    saved = mount / CHECKPOINT if mount else None
    if saved is not None and saved.is_dir():
        shutil.copytree(saved, ckpt, symlinks=True, dirs_exist_ok=True)
        _say(f"checkpoint restored from the previous session into {ckpt}")


def _run(command: str, env: dict[str, str], timeout: float | None) -> tuple[int, bool]:
    if not command.strip():
        return 0, False
    proc = subprocess.Popen(["sh", "-c", command], env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        return 124, True


def save(spec: dict[str, Any], working: Path) -> None:
    """Outputs go to cloudgpu-outputs/<the path as the job named it>."""
    for out in spec.get("outputs", []):
        src = Path(_at(out["at"]))
        if src.is_dir():
            into = working / OUTPUTS / out["path"].strip("/")
            shutil.copytree(src, into, symlinks=True, dirs_exist_ok=True)
    ckpt = _at(spec.get("checkpoint") or "")
    if ckpt and Path(ckpt).is_dir():
        shutil.copytree(ckpt, working / CHECKPOINT, symlinks=True, dirs_exist_ok=True)


def main(encoded: str) -> None:
    spec: dict[str, Any] = json.loads(base64.b64decode(encoded))
    root = _root()
    working, inputs = root / "working", root / "input"
    working.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    Path(_at(spec["nvme"])).mkdir(parents=True, exist_ok=True)
    stage(spec, inputs)
    restore_checkpoint(spec, inputs)
    env = {
        **os.environ,
        **{k: _at(v) if k.startswith("CLOUDGPU_") else v for k, v in spec.get("env", {}).items()},
    }
    limit = spec.get("timeout_s")
    margin = float(spec.get("margin_s", MARGIN_S))  # time kept to save outputs/checkpoint
    rc, timed_out = 0, False
    for step in ("setup", "run"):
        used = time.monotonic() - started
        left = None if limit is None else max(0.5, limit - margin - used)
        _say(f"{step}: starting")
        rc, timed_out = _run(spec.get(step, ""), env, left)
        if rc != 0:
            break
    save(spec, working)
    result = {"exit_code": rc, "step": step, "timed_out": timed_out}
    (working / RESULT).write_text(json.dumps(result))
    _say(f"{step} ended with status {rc}")
    sys.stdout.flush()
