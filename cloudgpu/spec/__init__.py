"""job.yaml: the JobSpec model, its loader/validator and its JSON Schema.

Public API: :func:`load_job`, :func:`parse_job`, :func:`json_schema` and the model
dataclasses. This package only reads job files; it never contacts a provider.
"""

from cloudgpu.spec.load import JobChecks, load_job, parse_job
from cloudgpu.spec.model import DataItem, GpuRequest, JobSpec, Limits, OutputItem, Resources
from cloudgpu.spec.schema import json_schema

__all__ = [
    "DataItem",
    "GpuRequest",
    "JobChecks",
    "JobSpec",
    "Limits",
    "OutputItem",
    "Resources",
    "json_schema",
    "load_job",
    "parse_job",
]
