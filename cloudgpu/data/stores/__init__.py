"""Object stores as the client sees them: list a source, sign one URL per object.

Each store module imports its SDK lazily (boto3, google-cloud-storage,
azure-storage-blob) and maps its errors at this boundary into cloudgpu.errors. Listing
and signing are metadata calls made with the client's credentials; no object's bytes
are read here. The instance gets only the signed URLs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cloudgpu.data.objects import Destination, Store
from cloudgpu.data.stores.azure import AzureStore
from cloudgpu.data.stores.gcs import GCSStore
from cloudgpu.data.stores.https import HttpsStore
from cloudgpu.data.stores.s3 import S3Store
from cloudgpu.data.uri import Source

_STORES: dict[str, Callable[[Mapping[str, str]], Store]] = {
    "s3": S3Store,
    "gs": GCSStore,
    "az": AzureStore,
    "https": HttpsStore,
}


_DESTINATIONS: dict[str, Callable[[Mapping[str, str]], Destination]] = {
    "s3": S3Store,
    "gs": GCSStore,
    "az": AzureStore,
}


def open_store(src: Source, env: Mapping[str, str]) -> Store:
    """The store for ``src``'s scheme, configured from ``env`` (endpoints, credentials)."""
    return _STORES[src.scheme](env)


def open_destination(dest: Source, env: Mapping[str, str]) -> Destination:
    """The store ``dest`` uploads go to (s3, gs, az; the job file's check refuses others)."""
    return _DESTINATIONS[dest.scheme](env)
