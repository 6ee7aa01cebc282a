"""The sim provider plugin (entry point ``sim``): a simulated cloud of real sshd servers."""

from cloudgpu_providers.sim.provider import SimProvider

__all__ = ["SimProvider"]
