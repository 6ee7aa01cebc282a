"""GCP provider plugin (entry point ``gcp``): Compute Engine GPU VMs.

Only the public class is re-exported; the google-cloud SDKs are imported lazily inside
the provider's methods (providers/gcp/clients.py), never at import time.
"""

from cloudgpu_providers.gcp.provider import GCPProvider

__all__ = ["GCPProvider"]
