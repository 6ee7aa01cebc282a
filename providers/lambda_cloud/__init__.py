"""Lambda provider plugin (entry point ``lambda``): on-demand GPU VMs on Lambda Cloud.

The package is ``lambda_cloud`` because ``lambda`` is a Python keyword. Only the public
class is re-exported; nothing here imports a cloud SDK.
"""

from cloudgpu_providers.lambda_cloud.provider import LambdaProvider

__all__ = ["LambdaProvider"]
