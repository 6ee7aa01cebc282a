"""Slurm provider: jobs on an existing Slurm cluster through its login node over SSH."""

from cloudgpu_providers.slurm.provider import SlurmProvider

__all__ = ["SlurmProvider"]
