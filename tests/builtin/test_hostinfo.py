"""Machine facts: nvidia-smi parsing, memory, CPUs, free space."""

from __future__ import annotations

from pathlib import Path

from cloudgpu.builtin import hostinfo


def test_parse_nvidia_smi_canonicalizes() -> None:
    text = "NVIDIA A100-SXM4-80GB, 81920\nNVIDIA A100-SXM4-80GB, 81920\n"
    gpu = hostinfo.parse_nvidia_smi(text)
    assert gpu.count == 2
    assert gpu.name.startswith("A100") and "80" in gpu.name
    assert 80 < gpu.memory_gb < 90


def test_parse_nvidia_smi_unknown_and_empty() -> None:
    assert hostinfo.parse_nvidia_smi("") == hostinfo.NO_GPU
    gpu = hostinfo.parse_nvidia_smi("Mystery Card 9000, 1024\n")
    assert gpu.name == "Mystery Card 9000" and gpu.count == 1


def test_machine_facts(tmp_path: Path) -> None:
    assert hostinfo.vcpus() >= 1
    assert hostinfo.memory_gb() > 0
    assert hostinfo.free_gb(tmp_path / "not" / "yet") > 0
