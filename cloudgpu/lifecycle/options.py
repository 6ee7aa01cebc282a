"""What a launch is told besides the job (cli flags and the [launch] config), and the
defaults each falls back to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cloudgpu.lifecycle.collect import COLLECT_GRACE_S
from cloudgpu.lifecycle.provision import Retry

DEADLINE_GRACE_S = 300.0  # past max_runtime, for collecting outputs and teardown
DEFAULT_DEADLINE_S = 24 * 3600.0  # instance-side deadline when the job sets no max_runtime
MAX_PREEMPTIONS = 5


@dataclass
class LaunchOptions:
    keep: bool = False
    grace_s: float = DEADLINE_GRACE_S
    # Called as teardown starts, e.g. so a second Ctrl-C cannot interrupt it.
    on_teardown: Callable[[], None] | None = None
    retry: Retry | None = None  # walk the offers again while none has capacity
    default_deadline_s: float = DEFAULT_DEADLINE_S
    collect_grace_s: float = COLLECT_GRACE_S
    max_preemptions: int = MAX_PREEMPTIONS
    # The plan's estimated tokens/s per offer (Offer.key): what the data probe checks
    # the input side against when the workload states no samples/s.
    tokens_per_s: Mapping[str, float] = field(default_factory=dict)
    # The planner's pick of nodes per offer (Offer.key) within a num_nodes range; an
    # offer not in it gets the job's num_nodes.
    node_counts: Mapping[str, int] = field(default_factory=dict)
