"""Google Colab's free tier as offer rows for comparison; Colab has no job API."""

from cloudgpu_providers.colab.provider import ColabProvider

__all__ = ["ColabProvider"]
