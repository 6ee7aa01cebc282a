"""The Kaggle provider: jobs as private script kernels on Kaggle's free GPUs."""

from cloudgpu_providers.kaggle.provider import KaggleProvider

__all__ = ["KaggleProvider"]
