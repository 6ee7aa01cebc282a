"""cloudgpu: run GPU work on the cheapest machine that truly fits it.

The core package. It must not import any cloud SDK at module level: providers do that
lazily inside themselves (see cloudgpu/provider.py).
"""

__version__ = "0.1.0"
