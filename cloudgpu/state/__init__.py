"""The SQLite state store: jobs, instances, events and spend."""

from cloudgpu.state.store import InstanceRecord, JobRecord, SpendRecord, Store

__all__ = ["InstanceRecord", "JobRecord", "SpendRecord", "Store"]
