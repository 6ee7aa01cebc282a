"""The SQLite state store: jobs, instances, events and spend."""

from cloudgpu.state.records import InstanceRecord, JobRecord, SpendRecord
from cloudgpu.state.store import Store

__all__ = ["InstanceRecord", "JobRecord", "SpendRecord", "Store"]
