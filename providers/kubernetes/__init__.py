"""Kubernetes provider: jobs as pods on an existing cluster, through the official client."""

from cloudgpu_providers.kubernetes.provider import KubernetesProvider

__all__ = ["KubernetesProvider"]
