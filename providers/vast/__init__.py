"""Vast.ai provider plugin (entry point ``vast``): GPU containers from Vast's marketplace.

Only the public class is re-exported; nothing here imports a cloud SDK.
"""

from cloudgpu_providers.vast.provider import VastProvider

__all__ = ["VastProvider"]
