"""Data that keeps the GPU fed: object stores pulled straight onto the instance, and the
probe that says whether the GPU will starve.

* :mod:`cloudgpu.data.uri` parses ``s3://``, ``gs://``, ``az://`` and ``https://`` sources;
* :mod:`cloudgpu.data.select` is the one exclude matcher (``exclude:`` globs and
  ``.cloudgpuignore`` files, gitignore syntax) for local and remote sources;
* :mod:`cloudgpu.data.stores` lists a source's objects and signs one short-lived GET URL
  per object with the client's own credentials (the SDKs are imported lazily);
* :mod:`cloudgpu.data.pull` sends those URLs to the instance-side puller
  (cloudgpu/remote/puller.py) and turns its progress lines into the client's progress bar;
* :mod:`cloudgpu.data.probe` runs the instance-side probe and gives the starvation verdict.

The client never reads an object's bytes: it lists, signs and watches. Nothing secret is
written to logs or the state store (signed URLs are redacted from every message).
"""
