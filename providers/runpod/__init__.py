"""RunPod provider plugin (entry point ``runpod``): GPU pods over RunPod's GraphQL API.

Only the public class is re-exported; nothing here imports a cloud SDK.
"""

from cloudgpu_providers.runpod.provider import RunPodProvider

__all__ = ["RunPodProvider"]
