"""The planner: sizes a job's workload (memory, time, data, startup) on every offer that
meets its resources, and ranks the candidates by what the whole job will cost.

Public API: :func:`plan` with :class:`Plan` / :class:`Candidate` (and :class:`Estimates`
to keep shape estimates between calls), :class:`StartupHistory`
(learned startup times), :class:`RunHistory` (the user's measured runs, which correct
later estimates), :func:`parse_workload` and the model table
(:func:`lookup_model`, :func:`known_models`). The registry, offers and history are passed
in; the planner never loads a catalog or opens a store itself.
"""

from cloudgpu.planner.calibrate import Calibration, RunHistory
from cloudgpu.planner.candidate import Candidate, Estimates, Plan
from cloudgpu.planner.frameworks import resolve as resolve_framework
from cloudgpu.planner.models import ModelArch, arch_from_params, known_models, lookup_model
from cloudgpu.planner.overhead import StartupHistory
from cloudgpu.planner.rank import OBJECTIVES, plan, workload_of
from cloudgpu.planner.workload import Workload, parse_workload

__all__ = [
    "OBJECTIVES",
    "Calibration",
    "Candidate",
    "Estimates",
    "ModelArch",
    "Plan",
    "RunHistory",
    "StartupHistory",
    "Workload",
    "arch_from_params",
    "known_models",
    "lookup_model",
    "parse_workload",
    "plan",
    "resolve_framework",
    "workload_of",
]
