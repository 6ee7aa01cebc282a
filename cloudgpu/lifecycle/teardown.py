"""Tear instances down, verify they are gone, and record what they cost.

Used at the end of every launch (whatever happened), by `cloudgpu down` and by the
orphan sweep. An instance whose create call never answered (no provider id) is looked
up by its ``cloudgpu-instance`` tag, so a crash mid-create leaves nothing billing.
"""

from __future__ import annotations

from cloudgpu.costs import billing
from cloudgpu.errors import CloudGPUError, ProviderError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.provider import TAG_INSTANCE
from cloudgpu.state.store import InstanceRecord

VERIFY_TIMEOUT_S = 300.0


def teardown_instance(
    deps: Deps,
    rec: InstanceRecord,
    *,
    final_state: str = states.I_TERMINATED,
    timeout: float = VERIFY_TIMEOUT_S,
) -> float:
    """Terminate ``rec``'s instance, wait until the provider confirms, record spend."""
    provider = deps.provider(rec.provider)
    sdk = provider.availability()
    if sdk.extra:  # without its SDK this install cannot reach the instance at all
        raise ProviderError(
            f"cannot tear down {rec.provider_id or rec.id}: {sdk.reason}",
            provider=rec.provider,
            hint=f"pip install 'cloudgpu[{sdk.extra}]', then `cloudgpu down {rec.job_id}`",
        )
    ids = (
        [rec.provider_id]
        if rec.provider_id
        else [i.id for i in provider.list_instances({TAG_INSTANCE: rec.id})]
    )
    for pid in ids:
        provider.terminate(pid)
    for pid in ids:
        waited = 0.0
        while not provider.describe(pid).state.is_gone:
            if waited >= timeout:
                raise ProviderError(
                    f"instance {pid} still not terminated after {timeout:.0f} s",
                    provider=rec.provider,
                    hint=f"check the provider console; `cloudgpu down {rec.job_id}` retries",
                )
            deps.sleep(0.25)
            waited += 0.25
    end = deps.clock()
    deps.store.update_instance(rec.id, state=final_state, terminated_at=end)
    spent = billing.record_spend(
        deps.store, deps.store.instance(rec.id), end, provider.capabilities
    )
    what = ", ".join(ids) or "nothing was created"
    deps.store.add_event(rec.job_id, f"instance_{final_state}", f"{what}; ${spent:.4f}", rec.id)
    return spent


def teardown_job(deps: Deps, job_id: str) -> list[str]:
    """Tear down every live instance of a job; return the failures (one line each)."""
    failures = []
    for rec in deps.store.instances(job_id, live_only=True):
        try:
            spent = teardown_instance(deps, rec)
        except CloudGPUError as exc:
            failures.append(f"{rec.id}: {exc}")
            deps.sink.info(f"teardown of {rec.provider_id or rec.id} FAILED: {exc}")
            continue
        deps.sink.info(
            f"terminated {rec.provider_id or rec.id} ({rec.provider}), billed ${spent:.4f}"
        )
    return failures


def job_cost(deps: Deps, job_id: str) -> float:
    """Spent so far: recorded spend plus what live instances have run up."""
    caps_of = lambda name: deps.provider(name).capabilities  # noqa: E731
    return billing.job_cost(deps.store, job_id, deps.clock(), caps_of).total
