"""Free tiers in the planner: sessions and weeks of quota, the checkpoint rule, never
chosen unless the job names the provider, and shown beside the plan when it fits."""

from __future__ import annotations

from cloudgpu_providers.colab.provider import free_offers as colab_offers
from cloudgpu_providers.kaggle.tiers import free_offers as kaggle_offers

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.planner import plan
from cloudgpu.planner.sessions import session_plan
from cloudgpu.spec.load import parse_job

T4_RENTAL = Offer(
    "aws", "g4dn.xlarge", "us-east-1", "use1-az1", "on_demand", "T4", 1, 16.0, 4, 16,
    0.526, observed_at="2026-12-01T00:00:00Z",
)  # fmt: skip


def job(extra: str = "", tokens: str = "2B", providers: str = "") -> str:
    return (
        f"name: lora\nresources:\n  gpu: T4\n{providers}"
        f"workload: {{kind: lora, params: 1B, tokens: {tokens}, seq_len: 1024}}\n"
        f"run: python train.py\n{extra}"
    )


def kaggle_t4() -> Offer:
    return next(o for o in kaggle_offers() if o.instance_type == "NvidiaTeslaT4")


def test_sessions_and_weeks() -> None:
    o = kaggle_t4()
    one = session_plan(o, 3.0, has_checkpoint=False)
    assert (one.sessions, one.weeks, one.fits) == (1, 1, True)
    long = session_plan(o, 50.0, has_checkpoint=True)
    assert (long.sessions, long.weeks, long.fits) == (5, 2, True)
    assert "5 sessions, 2 week(s) of quota" in long.note
    refused = session_plan(o, 50.0, has_checkpoint=False)
    assert not refused.fits and "needs 5 free-tier sessions of 12 h" in refused.reason
    colab = session_plan(colab_offers()[0], 5.0, has_checkpoint=False)
    assert colab.weeks is None and "no published weekly quota" in colab.note


def test_free_tier_is_never_chosen_unless_named() -> None:
    offers = [T4_RENTAL, *kaggle_offers(), *colab_offers()]
    p = plan(parse_job(job("checkpoint: /nvme/ckpt\n")), offers,
             registry=load_registry())  # fmt: skip
    assert [c.offer.provider for c in p.candidates] == ["aws"]
    # ...but the plan says which free tiers would fit, with their sessions.
    free = {c.offer.provider: c for c in p.free}
    assert set(free) == {"kaggle", "colab"}
    assert free["kaggle"].note.startswith("free tier: ") and free["kaggle"].est_cost == 0


def test_named_free_tier_wins_and_needs_a_checkpoint_for_many_sessions() -> None:
    offers = [T4_RENTAL, *kaggle_offers()]
    named = "  providers: [kaggle, aws]\n"
    with_ckpt = plan(parse_job(job("checkpoint: /nvme/ckpt\n", providers=named)),
                     offers, registry=load_registry())  # fmt: skip
    best = with_ckpt.candidates[0]
    assert best.offer.provider == "kaggle" and best.est_cost == 0
    assert "sessions" in best.note and with_ckpt.free == []
    without = plan(parse_job(job(providers=named)), offers,
                   registry=load_registry())  # fmt: skip
    assert [c.offer.provider for c in without.candidates] == ["aws"]
    (kag,) = [c for c in without.rejected if c.offer.provider == "kaggle" and c.est_hours]
    assert "set checkpoint:" in kag.reason
