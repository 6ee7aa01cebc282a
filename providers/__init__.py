"""Provider plugins shipped with cloudgpu, installed as ``cloudgpu_providers``.

Each subpackage registers itself in the ``cloudgpu.providers`` entry-point group
(pyproject.toml) and imports its cloud SDK lazily, inside its methods.
"""
