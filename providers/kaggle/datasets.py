"""Local data folders uploaded to Kaggle as private datasets, and their removal.

Each local data item becomes one private dataset ``<kernel-slug>-d<i>`` holding one tar
file (runner.py unpacks it with its members checked), uploaded the way the official
client does it (kaggle_api_extended ``_upload_blob``): ``StartBlobUpload`` returns a
token and an upload URL, the bytes go to that URL with one PUT, then ``CreateDataset``
names the token; the dataset is usable once ``GetDatasetStatus`` says READY. The names
are derived from the kernel's slug so ``terminate`` (and the orphan sweep) can delete
them without any other record.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from cloudgpu_providers.kaggle.api import PROVIDER, KaggleApi

from cloudgpu.errors import NotFoundError, ProviderError, TransientError

MAX_ITEMS = 8  # data items per job that may be uploaded (terminate looks for this many)
READY_TIMEOUT_S = 600.0


def dataset_slug(kernel_slug: str, index: int) -> str:
    return f"{kernel_slug}-d{index}"


def _tar(src: Path, into: Path) -> Path:
    """``src`` (a folder or a file) as an uncompressed tar; links are not followed."""
    out = into / "data.tar"
    with tarfile.open(out, "w") as tar:
        if src.is_dir():
            for entry in sorted(src.rglob("*")):
                if entry.is_file() and not entry.is_symlink():
                    tar.add(entry, arcname=str(entry.relative_to(src)), recursive=False)
        else:
            tar.add(src, arcname=src.name, recursive=False)
    return out


def _put(url: str, path: Path, timeout_s: float) -> None:
    size = path.stat().st_size
    with path.open("rb") as f:
        req = urllib.request.Request(
            url, data=f, method="PUT", headers={"Content-Length": str(size)}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                if resp.status not in (200, 201):
                    raise ProviderError(f"Kaggle upload answered {resp.status}", provider=PROVIDER)
        except urllib.error.HTTPError as exc:
            raise ProviderError(
                f"Kaggle upload failed: HTTP {exc.code}", provider=PROVIDER
            ) from None
        except OSError as exc:
            raise TransientError(f"Kaggle upload failed: {exc}", provider=PROVIDER) from None


def upload(
    api: KaggleApi,
    src: Path,
    slug: str,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> str:
    """Upload ``src`` as the private dataset ``slug``; return the tar file's name in it."""
    from kagglesdk.blobs.types.blob_api_service import (  # lazy: the SDK is an extra
        ApiBlobType,
        ApiStartBlobUploadRequest,
        ApiStartBlobUploadResponse,
    )
    from kagglesdk.datasets.types.dataset_api_service import (
        ApiCreateDatasetRequest,
        ApiCreateDatasetResponse,
        ApiDatasetNewFile,
    )

    with tempfile.TemporaryDirectory(prefix="cloudgpu-kaggle-") as tmp:
        archive = _tar(src, Path(tmp))
        start = ApiStartBlobUploadRequest()
        start.type = ApiBlobType.DATASET
        start.name = archive.name
        start.content_length = archive.stat().st_size
        start.last_modified_epoch_seconds = int(os.path.getmtime(archive))
        blob = api.call(
            "blobs.BlobApiService", "StartBlobUpload", start, ApiStartBlobUploadResponse
        )
        _put(blob.create_url, archive, 600.0)
    new_file = ApiDatasetNewFile()
    new_file.token = blob.token
    create = ApiCreateDatasetRequest()
    create.owner_slug = api.username
    create.slug = slug
    create.title = slug
    create.license_name = "unknown"
    create.is_private = True
    create.files = [new_file]
    made = api.call("datasets.DatasetApiService", "CreateDataset", create, ApiCreateDatasetResponse)
    if made.error:
        raise ProviderError(f"Kaggle refused dataset {slug}: {made.error}", provider=PROVIDER)
    _wait_ready(api, slug, clock, sleep)
    return archive.name


def _wait_ready(
    api: KaggleApi, slug: str, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    from kagglesdk.datasets.types.dataset_api_service import (
        ApiGetDatasetStatusRequest,
        ApiGetDatasetStatusResponse,
    )
    from kagglesdk.datasets.types.dataset_enums import DatabundleVersionStatus as Status

    ask = ApiGetDatasetStatusRequest()
    ask.owner_slug, ask.dataset_slug = api.username, slug
    give_up = clock() + READY_TIMEOUT_S
    step = 0.2
    while True:
        status = api.call(
            "datasets.DatasetApiService", "GetDatasetStatus", ask, ApiGetDatasetStatusResponse
        ).status
        if status == Status.READY:
            return
        if status in (Status.FAILED, Status.DELETED):
            raise ProviderError(f"Kaggle could not process dataset {slug}", provider=PROVIDER)
        if clock() > give_up:
            raise TransientError(
                f"Kaggle dataset {slug} not ready after {READY_TIMEOUT_S:.0f} s", provider=PROVIDER
            )
        sleep(step)
        step = min(step * 2, 5.0)


def delete_all(api: KaggleApi, kernel_slug: str) -> None:
    """Delete the datasets uploaded for ``kernel_slug`` (created in order: stop at the
    first that does not exist)."""
    from kagglesdk.datasets.types.dataset_api_service import (
        ApiDeleteDatasetRequest,
        ApiDeleteDatasetResponse,
    )

    for i in range(MAX_ITEMS):
        req = ApiDeleteDatasetRequest()
        req.owner_slug, req.dataset_slug = api.username, dataset_slug(kernel_slug, i)
        try:
            api.call("datasets.DatasetApiService", "DeleteDataset", req, ApiDeleteDatasetResponse)
        except NotFoundError:
            return
