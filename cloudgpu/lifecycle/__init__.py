"""The job lifecycle: provision -> bootstrap -> stage data -> setup -> run -> collect ->
teardown, with failover, limits, spot preemption and orphan sweeps.

Entry points: :class:`cloudgpu.lifecycle.run.JobRun` (one job, given ranked offers and
:class:`cloudgpu.lifecycle.deps.Deps`), :mod:`cloudgpu.lifecycle.launch` (offers and job
records for `launch`), :mod:`cloudgpu.lifecycle.down` (`down`, `down --orphans`). The
lifecycle reads provider Capabilities only; it never branches on a provider's name.
"""
