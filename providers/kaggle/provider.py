"""The Kaggle provider: a job runs as a private Kaggle script kernel on a free GPU.

Kaggle gives GPUs at no cost within a weekly quota and a 12-hour session limit
(tiers.py). There is no SSH and no shell: the job is one batch submission
(cloudgpu/batch.py). ``create`` uploads local data as private datasets and pushes a
kernel whose source is runner.py plus the job's spec, which starts the run;
``describe`` follows the kernel's session status; when it has ended, ``batch_result``
reads the exit status and the log, and ``fetch_output`` downloads declared outputs from
the kernel's output files. ``terminate`` deletes the kernel and its datasets.

Config (``[providers.kaggle]``, all optional): ``api_url`` (default
https://api.kaggle.com, or ``KAGGLE_API_BASE_URL``), ``username`` (when only an API
token is configured), ``enable_internet`` (default true: setup may pip install),
``session_hours`` (default 12, Kaggle's documented session limit),
``attempts``/``backoff_s``/``poll_s``. Credentials as the official client finds them
(api.find_credentials); they never leave the Authorization header.

What Kaggle cannot do, said here and in the README: no live log (it arrives when the
session ends), no SSH/exec, no spot, one machine per job, at most 12 hours a session
(longer jobs continue in a next session only through a checkpoint), 20 GB of outputs.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from cloudgpu_providers.kaggle import datasets, kernel, tiers
from cloudgpu_providers.kaggle.api import (
    DEFAULT_BASE_URL,
    KEY_HINT,
    PROVIDER,
    KaggleApi,
    find_credentials,
)
from cloudgpu_providers.kaggle.runner import OUTPUTS, RESULT

from cloudgpu.batch import BatchJob, BatchResult
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import (
    ConfigError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from cloudgpu.provider import (
    TAG_INSTANCE,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
    ProviderContext,
)

MAX_LOG_BYTES = 32 << 20
MAX_FILE_BYTES = int(tiers.OUTPUT_GB * 1e9)


class KaggleProvider(Provider):
    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[Capabilities] = Capabilities(
        spot=False,
        preemption_notice=False,
        batch=True,
        billing_granularity_s=1,
    )

    # -- credentials -----------------------------------------------------------------

    def __init__(self, ctx: ProviderContext) -> None:
        super().__init__(ctx)
        self._failures: dict[str, str] = {}  # kernel -> Kaggle's failureMessage, last seen

    def availability(self) -> Availability:
        found = find_credentials(dict(self.ctx.env), dict(self.ctx.config))
        looked = ("env:KAGGLE_API_TOKEN", "env:KAGGLE_USERNAME+KAGGLE_KEY", "file:~/.kaggle")
        if found is None:
            return Availability(False, f"no Kaggle credentials: {KEY_HINT}", looked)
        return Availability(True, f"Kaggle user {found.username} ({found.source})", looked)

    def _api(self) -> KaggleApi:
        found = find_credentials(dict(self.ctx.env), dict(self.ctx.config))
        if found is None:
            raise ConfigError("no Kaggle credentials", hint=KEY_HINT)
        base = str(
            self.ctx.config.get("api_url")
            or self.ctx.env.get("KAGGLE_API_BASE_URL")
            or DEFAULT_BASE_URL
        )
        return KaggleApi(
            base,
            found,
            self.ctx.sleep,
            attempts=int(self.ctx.config.get("attempts", 5)),
            backoff_s=float(self.ctx.config.get("backoff_s", 1.0)),
        )

    def check(self) -> Availability:
        av = self.availability()
        if not av.enabled:
            return av
        used, total, refresh = self.gpu_quota(self._api())
        return Availability(
            True, f"{av.reason}; GPU quota {used:.1f} of {total:.1f} h used, resets {refresh}"
        )

    def gpu_quota(self, api: KaggleApi) -> tuple[float, float, str]:
        """(hours used, hours allowed, refresh time) of this week's GPU quota."""
        from kagglesdk.kernels.types.kernels_api_service import (
            ApiGetAcceleratorQuotaStatisticsRequest,
            ApiGetAcceleratorQuotaStatisticsResponse,
        )

        stats = api.call(
            "kernels.KernelsApiService",
            "GetAcceleratorQuotaStatistics",
            ApiGetAcceleratorQuotaStatisticsRequest(),
            ApiGetAcceleratorQuotaStatisticsResponse,
        )
        quota = stats.gpu_quota
        used = quota.time_used.total_seconds() / 3600 if quota and quota.time_used else 0.0
        total = (
            quota.total_time_allowed.total_seconds() / 3600
            if quota and quota.total_time_allowed
            else tiers.WEEKLY_GPU_HOURS
        )
        refresh = stats.quota_refresh_time.isoformat() if stats.quota_refresh_time else "weekly"
        return used, total, refresh

    # -- offers ----------------------------------------------------------------------

    def offers(self) -> list[Offer]:
        return tiers.free_offers()

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        job = request.batch
        if job is None:
            raise ProviderError("Kaggle runs whole jobs only (no SSH)", provider=PROVIDER)
        api = self._api()
        slug = kernel.slug(
            request.tags, request.tags.get(TAG_INSTANCE) or request.idempotency_token
        )
        ref = f"{api.username}/{slug}"
        if self._status(api, ref) is not None:  # created before a lost answer or a crash
            return self._instance(ref, InstanceState.PENDING, request.tags)
        used, total, refresh = self.gpu_quota(api)
        if used >= total:
            raise QuotaError(
                f"Kaggle weekly GPU quota used up ({used:.1f} of {total:.1f} h); resets {refresh}",
                provider=PROVIDER,
            )
        data = self._data(api, job, slug)
        self._push(api, ref, slug, request, job, data)
        return self._instance(ref, InstanceState.PENDING, request.tags)

    def _data(self, api: KaggleApi, job: BatchJob, slug: str) -> list[dict[str, str]]:
        out = []
        uploads = 0
        for item in job.data:
            dst = kernel.on_kernel(item.dst)
            if item.src.startswith("kaggle://"):
                ref = item.src[len("kaggle://") :].strip("/")
                out.append({"kind": "dataset", "dataset": ref, "dst": dst})
                continue
            if "://" in item.src:
                raise ConfigError(
                    f"kaggle: data source {item.src}: only local paths and kaggle://OWNER/"
                    "DATASET are supported on Kaggle"
                )
            if uploads >= datasets.MAX_ITEMS:
                raise ConfigError(f"kaggle: at most {datasets.MAX_ITEMS} local data items")
            ds = datasets.dataset_slug(slug, uploads)
            uploads += 1
            name = datasets.upload(api, Path(item.src), ds, self.ctx.clock, self.ctx.sleep)
            out.append(
                {"kind": "upload", "dataset": f"{api.username}/{ds}", "file": name, "dst": dst}
            )
        return out

    def _push(
        self,
        api: KaggleApi,
        ref: str,
        slug: str,
        request: CreateRequest,
        job: BatchJob,
        data: list[dict[str, str]],
    ) -> None:
        from kagglesdk.kernels.types.kernels_api_service import (
            ApiSaveKernelRequest,
            ApiSaveKernelResponse,
        )

        save = ApiSaveKernelRequest()
        save.slug = ref
        save.new_title = slug  # Kaggle derives the slug from the title: keep them equal
        session_s = self._session_s()
        save.text = kernel.source(kernel.spec(job, data, session_s, job.resume_from))
        save.language = "python"
        save.kernel_type = "script"
        save.is_private = True
        save.enable_gpu = True
        save.enable_internet = bool(self.ctx.config.get("enable_internet", True))
        save.dataset_data_sources = sorted({d["dataset"] for d in data})
        if job.resume_from:  # the previous session's output (its checkpoint) as an input
            save.kernel_data_sources = [job.resume_from]
        save.machine_shape = tiers.machine_shape(request.offer.instance_type)
        limit = min(job.timeout_s or session_s, session_s)
        save.session_timeout_seconds = max(1, round(limit))
        try:
            saved = api.call("kernels.KernelsApiService", "SaveKernel", save, ApiSaveKernelResponse)
        except TransientError:
            # SaveKernel starts a run: never send it twice. Did the first one land?
            if self._status(api, ref) is None:
                raise
            return
        if saved.error:
            err = str(saved.error)
            if "quota" in err.lower():
                raise QuotaError(f"Kaggle: {err}", provider=PROVIDER)
            raise ProviderError(f"Kaggle refused the kernel: {err}", provider=PROVIDER)

    def describe(self, instance_id: str) -> Instance:
        if not kernel.fields(instance_id.partition("/")[2]):
            return Instance(id=instance_id, provider=PROVIDER, state=InstanceState.TERMINATED)
        status = self._status(self._api(), instance_id)
        state = (
            InstanceState.TERMINATED
            if status is None
            else _STATES.get(status, InstanceState.UNKNOWN)
        )
        return self._instance(instance_id, state, {})

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        from kagglesdk.kernels.types.kernels_api_service import (
            ApiListKernelsRequest,
            ApiListKernelsResponse,
        )

        api = self._api()
        out: list[Instance] = []
        token = ""
        for _ in range(100):  # pages of 100: far more kernels than any user keeps
            req = ApiListKernelsRequest()
            req.user, req.search, req.page_size = api.username, kernel.PREFIX, 100
            if token:
                req.page_token = token
            page = api.call("kernels.KernelsApiService", "ListKernels", req, ApiListKernelsResponse)
            for meta in page.kernels:
                ref = meta.ref or f"{api.username}/{meta.slug}"
                if kernel.matches(ref.partition("/")[2], tags):
                    found = self.describe(ref)
                    if not found.state.is_gone:
                        out.append(found)
            token = page.next_page_token or ""
            if not token:
                break
        return out

    def terminate(self, instance_id: str) -> None:
        from kagglesdk.kernels.types.kernels_api_service import (
            ApiDeleteKernelRequest,
            ApiDeleteKernelResponse,
        )

        user, _, slug = instance_id.partition("/")
        if not kernel.fields(slug):
            return
        api = self._api()
        req = ApiDeleteKernelRequest()
        req.user_name, req.kernel_slug = user, slug
        try:
            done = api.call(
                "kernels.KernelsApiService", "DeleteKernel", req, ApiDeleteKernelResponse
            )
        except NotFoundError:
            done = None
        if done is not None and done.error_message:
            raise ProviderError(
                f"Kaggle could not delete {instance_id}: {done.error_message}", provider=PROVIDER
            )
        datasets.delete_all(api, slug)
        if self._status(api, instance_id) is not None:
            raise TransientError(
                f"kernel {instance_id} still exists after delete",
                provider=PROVIDER,
                hint="run `cloudgpu down` again",
            )

    # -- batch -----------------------------------------------------------------------

    def batch_result(self, instance: Instance) -> BatchResult:
        api = self._api()
        files, log = self._outputs(api, instance.id)
        result = files.get(RESULT)
        text = _kaggle_log(log)
        if result is None:
            status = self._status(api, instance.id)
            why = self._failures.get(instance.id) or "Kaggle gave no reason"
            return BatchResult(
                exit_code=1,
                log=text,
                detail=f"kernel ended {status or 'gone'} without a result: {why}",
            )
        data = json.loads(_download(result, 1 << 16) or b"{}")
        return BatchResult(
            exit_code=int(data.get("exit_code", 1)),
            log=text,
            timed_out=bool(data.get("timed_out")),
        )

    def fetch_output(self, instance: Instance, src: str, dest: Path) -> int:
        files, _ = self._outputs(self._api(), instance.id)
        prefix = f"{OUTPUTS}/{src.strip('/')}/"
        total = 0
        root = dest.resolve()
        for name, url in files.items():
            if not name.startswith(prefix):
                continue
            rel = name[len(prefix) :]
            parts = rel.split("/")
            if not rel or any(p in ("", ".", "..") for p in parts) or "\\" in rel:
                raise ProviderError(
                    f"Kaggle listed an unsafe output name {name!r}", provider=PROVIDER
                )
            target = root.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            total += _download_to(url, target, MAX_FILE_BYTES)
        return total

    # -- helpers ---------------------------------------------------------------------

    def _session_s(self) -> float:
        hours = self.ctx.config.get("session_hours", tiers.SESSION_HOURS)
        if isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours <= 24:
            raise ConfigError(
                "providers.kaggle.session_hours: expected hours between 0 and 24", hint=None
            )
        return float(hours) * 3600

    def _status(self, api: KaggleApi, ref: str) -> Any:
        from kagglesdk.kernels.types.kernels_api_service import (
            ApiGetKernelSessionStatusRequest,
            ApiGetKernelSessionStatusResponse,
        )

        req = ApiGetKernelSessionStatusRequest()
        req.user_name, _, req.kernel_slug = ref.partition("/")
        try:
            got = api.call(
                "kernels.KernelsApiService",
                "GetKernelSessionStatus",
                req,
                ApiGetKernelSessionStatusResponse,
            )
        except NotFoundError:
            return None
        self._failures[ref] = got.failure_message or ""
        return got.status.name

    def _outputs(self, api: KaggleApi, ref: str) -> tuple[dict[str, str], str]:
        from kagglesdk.kernels.types.kernels_api_service import (
            ApiListKernelSessionOutputRequest,
            ApiListKernelSessionOutputResponse,
        )

        files: dict[str, str] = {}
        log = ""
        token = ""
        for _ in range(1000):
            req = ApiListKernelSessionOutputRequest()
            req.user_name, _, req.kernel_slug = ref.partition("/")
            if token:
                req.page_token = token
            page = api.call(
                "kernels.KernelsApiService",
                "ListKernelSessionOutput",
                req,
                ApiListKernelSessionOutputResponse,
            )
            files.update({f.file_name: f.url for f in page.files if f.file_name and f.url})
            log = log or (page.log or "")
            token = page.next_page_token or ""
            if not token:
                break
        return files, log

    def _instance(self, ref: str, state: InstanceState, tags: Mapping[str, str]) -> Instance:
        slug = ref.partition("/")[2]
        return Instance(
            id=ref,
            provider=PROVIDER,
            state=state,
            region="kaggle",
            tags={**kernel.readable_tags(slug), **tags},
            price_per_hour=0.0,
            launched_at=self.ctx.clock() if state == InstanceState.PENDING else None,
            nvme_mount=kernel.NVME,
            extra={"url": f"https://www.kaggle.com/code/{ref}"},
        )


_STATES = {
    "QUEUED": InstanceState.PENDING,
    "NEW_SCRIPT": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "COMPLETE": InstanceState.STOPPED,
    "ERROR": InstanceState.STOPPED,
    "CANCEL_REQUESTED": InstanceState.STOPPING,
    "CANCEL_ACKNOWLEDGED": InstanceState.STOPPED,
}


def _kaggle_log(log: str) -> bytes:
    """The kernel log as text. Kaggle keeps it as a JSON list of
    ``{"stream_name", "time", "data"}`` entries; anything else is passed through."""
    try:
        entries = json.loads(log) if log.strip().startswith("[") else None
    except ValueError:
        entries = None
    if isinstance(entries, list):
        text = "".join(str(e.get("data", "")) for e in entries if isinstance(e, dict))
    else:
        text = log
    return text.encode("utf-8", "replace")[:MAX_LOG_BYTES]


def _download(url: str, limit: int) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            data = bytes(resp.read(limit + 1))
    except OSError as exc:
        raise TransientError(f"Kaggle output download failed: {exc}", provider=PROVIDER) from None
    if len(data) > limit:
        raise ProviderError(f"Kaggle output larger than {limit} bytes", provider=PROVIDER)
    return data


def _download_to(url: str, target: Path, limit: int) -> int:
    if target.is_symlink():  # never write through a link, whoever made it
        target.unlink()
    total = 0
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, target.open("xb") as f:
            while chunk := resp.read(1 << 20):
                total += len(chunk)
                if total > limit:
                    raise ProviderError(
                        f"Kaggle output {target.name} exceeds {limit} bytes", provider=PROVIDER
                    )
                f.write(chunk)
    except OSError as exc:
        raise TransientError(f"Kaggle output download failed: {exc}", provider=PROVIDER) from None
    return total
