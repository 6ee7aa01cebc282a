"""The project's exception tree. Every error a user can cause or meet is one of these.

    CloudGPUError                 base; .hint is an optional one-line suggestion
     +-- ConfigError              bad config file / job.yaml / command-line input
     |    +-- SpecError           job.yaml: carries file, line and key
     +-- CatalogError             snapshot/cache unreadable, unknown GPU, empty result
     +-- ProviderError            raised by a provider at its boundary (.provider)
     |    +-- AuthError           missing/expired/invalid credentials
     |    +-- CapacityError       no capacity for that offer now (fail over)
     |    +-- QuotaError          quota/limit reached (fail over)
     |    +-- NotFoundError       instance/region/type does not exist
     |    +-- TransientError      throttling, 5xx, timeouts: retry with backoff
     +-- RemoteError              SSH / transfer / host-key failures
     |    +-- HostKeyError        host key changed or unverifiable: refuse
     +-- JobError                 the job's own setup/run failed (.exit_code)
     +-- LimitExceeded            max_runtime / max_cost reached
     +-- StateError               state store problems
          +-- StoreBusy           another process holds the store's write lock

Providers map their SDK exceptions into these with ``raise X(...) from exc`` so the rest
of the code never sees an SDK type. The CLI turns any CloudGPUError into one line plus the
hint and a non-zero exit status (cloudgpu/cli/__init__.py). Messages must never contain a
secret: use :func:`redact` on anything that might.
"""

from __future__ import annotations

import errno
import re
import sqlite3

# Exit statuses of `cloudgpu`, documented in the README. A job's own failure exits with
# the job's exit code instead. 2 is bad input: a job, config or flag, or a file or
# directory the user pointed cloudgpu at that cannot be used (read-only or full home,
# --out on a full disk, a locked state store). 3 is a bug in cloudgpu, nothing else.
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_PROVIDER = 4
EXIT_REMOTE = 5
EXIT_LIMIT = 6
EXIT_BUSY = 7  # the state store stayed locked by another process
EXIT_INTERRUPTED = 130
# cloudgpu's own codes. A job that exits with one of them makes cloudgpu exit
# EXIT_JOB_CLASH instead, so 2-7 and 130 always mean cloudgpu itself; the job's real code
# is in the error line and in `cloudgpu status JOB --json`.
EXIT_JOB_CLASH = 1
OWN_EXITS = frozenset(
    {EXIT_USAGE, EXIT_ERROR, EXIT_PROVIDER, EXIT_REMOTE, EXIT_LIMIT, EXIT_BUSY, EXIT_INTERRUPTED}
)


class CloudGPUError(Exception):
    """Base of every cloudgpu error. ``hint`` is shown after the message."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(redact(message))
        self.hint = redact(hint) if hint else None


class ConfigError(CloudGPUError):
    exit_code = EXIT_USAGE


class SpecError(ConfigError):
    """A job file problem, located at ``file:line`` and ``key``."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = file or "<job>"
        if line is not None:
            where += f":{line}"
        if key:
            where += f": {key}"
        super().__init__(f"{where}: {message}", hint=hint)
        self.file, self.line, self.key = file, line, key
        # True when the JSON Schema cannot state the rule broken (a GPU name, a path that
        # must exist, a magnitude inside "99999999d"): tests compare verdicts with it.
        self.beyond_schema = False


class CatalogError(CloudGPUError):
    exit_code = EXIT_USAGE


class ProviderError(CloudGPUError):
    exit_code = EXIT_PROVIDER

    def __init__(self, message: str, *, provider: str = "", hint: str | None = None) -> None:
        super().__init__(f"{provider}: {message}" if provider else message, hint=hint)
        self.provider = provider


class AuthError(ProviderError):
    pass


class CapacityError(ProviderError):
    pass


class QuotaError(ProviderError):
    pass


class NotFoundError(ProviderError):
    pass


class TransientError(ProviderError):
    pass


class RemoteError(CloudGPUError):
    exit_code = EXIT_REMOTE


class HostKeyError(RemoteError):
    pass


class JobError(CloudGPUError):
    """The job's own command failed; the CLI exits with the job's exit code."""

    def __init__(self, message: str, *, exit_code: int, hint: str | None = None) -> None:
        if exit_code in OWN_EXITS:
            clash = f"cloudgpu exits {EXIT_JOB_CLASH}: {exit_code} is one of its own codes"
            hint = f"{hint}; {clash}" if hint else clash
            exit_code = EXIT_JOB_CLASH
        super().__init__(message, hint=hint)
        self.exit_code = exit_code


class LimitExceeded(CloudGPUError):
    exit_code = EXIT_LIMIT


class StateError(CloudGPUError):
    exit_code = EXIT_USAGE


class StoreBusy(StateError):
    exit_code = EXIT_BUSY


_SECRET_PATTERNS = [
    # first: "Authorization: Bearer TOKEN" must lose TOKEN, not just the word Bearer
    re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=-]+"),
    # key=value / key: value forms for the usual secret names
    re.compile(
        r"(?i)\b((?:aws_)?secret(?:_access)?_key|api[_-]?key|token|password|passwd|"
        r"client_secret|authorization|jitconfig|encoded_jit_config)(\s*[=:]\s*|\"\s*:\s*\")"
        # not cloudgpu's own words after a key it names ("api_key: expected text, ...")
        r"(?!(?:expected|unknown|missing|duplicate)\b)([^\s\"',;]+)"
    ),
    # signed object URLs (S3 presigned, GCS V4, Azure SAS): the signature is the secret;
    # a GCS resumable session URI's upload_id grants the upload by itself
    re.compile(
        r"(?i)\b(X-Amz-Signature|X-Amz-Security-Token|X-Goog-Signature|sig|upload_id)(=)"
        r"([^&\s\"']+)"
    ),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\brpa_[A-Za-z0-9]{20,}\b"),
]


def redact(text: str) -> str:
    """Replace anything that looks like a secret with ``***``."""
    for pat in _SECRET_PATTERNS:
        if pat.groups >= 3:
            text = pat.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
        else:
            text = pat.sub("***", text)
    return text


# OSError numbers that say the machine's files are unusable (not that cloudgpu is wrong).
_UNUSABLE = {
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENAMETOOLONG: "file name too long",
    errno.ELOOP: "too many levels of symbolic links",
    errno.ENOTDIR: "a path component is not a directory",
    errno.EISDIR: "is a directory",
    errno.EMFILE: "too many open files",
    errno.EIO: "input/output error",
}
_SQLITE = (
    (("locked", "busy"), "the state store is locked by another cloudgpu process",
     "wait for it to finish, or stop it (`cloudgpu status` lists running jobs)"),
    (("readonly", "read-only"), "the state store is read-only",
     "make CLOUDGPU_HOME writable, or point CLOUDGPU_HOME elsewhere"),
    (("full",), "no space left for the state store",
     "free space on the disk of CLOUDGPU_HOME"),
    (("unable to open", "disk i/o"), "the state store cannot be opened",
     "check that CLOUDGPU_HOME exists and is writable"),
)  # fmt: skip


def environment_error(exc: BaseException) -> CloudGPUError | None:
    """The user-facing error for a failure of the machine's files (disk full, read-only,
    permissions, a locked or unopenable state store); None when ``exc`` is not one."""
    if isinstance(exc, OSError) and exc.errno in _UNUSABLE:
        where = f"{exc.filename}: " if exc.filename else ""
        return ConfigError(
            f"{where}{exc.strerror or _UNUSABLE[exc.errno]}",
            hint="check the path, its permissions and free space (CLOUDGPU_HOME relocates "
            "cloudgpu's own files)",
        )
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        for needles, message, hint in _SQLITE:
            if any(n in text for n in needles):
                return StateError(f"{message} ({exc})", hint=hint)
    return None
