"""One exception root for the whole project.

Every error names what it is about: the table, the file and the offending value where they are known.
`RetryableError` marks conditions that may pass on their own (I/O hiccups, lock contention, a commit
that lost a race); `PermanentError` marks conditions that will fail again until someone changes the
input (a corrupt file, a bad config, an unsupported table). The daemon acts on the split: a retryable failure
backs off; a permanent failure of an action holds that action back, of a table quarantines it.

Every error class is declared here, but two that carry a value of a higher layer and live beside it:
`tableservice.planning.compaction.plan.CompactionBlockedError` (a ConflictError naming the blocking instant) and
`tableservice.config.load.ConfigValidationError` (a ConfigError listing every configuration issue).
Parsers' internal signals (`ThriftError`, the log format's `MetadataError`, `ConfigIssues` for pydantic) are
ValueErrors that never leave their module: they are turned into the typed errors here.
"""

from __future__ import annotations

import re

# Credentials inside URLs and connect strings: `scheme://user:password@host`, ZooKeeper's `user:pass@host:2181`
# (at the start or after a comma), and `token=` parameters (Spark Connect's `sc://host/;token=...`, query strings).
_USER_INFO = re.compile(r"(^|://|,|\s|[\"'(=])([^\s/@,:\"'(=]*:[^\s/@,\"']*)@(?=[^\s@])")
_TOKEN_PARAM = re.compile(r"(?i)([;?&]\s*token\s*=)[^;&\s\"']*")


def has_url_credentials(text: str) -> bool:
    """Whether `text` holds a user:password pair before an `@` or a `token=` parameter."""
    return bool(_USER_INFO.search(text) or _TOKEN_PARAM.search(text))


def redact_url_credentials(text: str) -> str:
    """`text` with user-info (`user:password@` -> `***@`) and `token=` parameters (`token=***`) masked."""
    text = _USER_INFO.sub(lambda m: f"{m.group(1)}***@", text)
    return _TOKEN_PARAM.sub(lambda m: f"{m.group(1)}***", text)


class TableServiceError(Exception):
    """Root of every error raised on purpose by tableservice."""

    retryable: bool = False

    def __init__(self, problem: str, *, table: str | None = None, path: str | None = None) -> None:
        # No error ever carries credentials a URL held (an endpoint's user-info, a Spark Connect token).
        problem = redact_url_credentials(problem)
        path = redact_url_credentials(path) if path is not None else None
        self.problem = problem
        self.table = table
        self.path = path
        parts = [problem]
        if table is not None:
            parts.append(f"table={table}")
        if path is not None:
            parts.append(f"file={path}")
        super().__init__(" | ".join(parts))

    def with_context(self, *, table: str | None = None, path: str | None = None) -> TableServiceError:
        """Return a copy of this error that also names `table` and `path` when it did not yet."""
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        TableServiceError.__init__(
            clone,
            self.problem,
            table=self.table if self.table is not None else table,
            path=self.path if self.path is not None else path,
        )
        return clone


class RetryableError(TableServiceError):
    """The same call may succeed later without anyone changing anything."""

    retryable = True


class PermanentError(TableServiceError):
    """The call will keep failing until its input changes."""


# --- retryable -------------------------------------------------------------------------------------


class StorageError(RetryableError):
    """An I/O operation failed for a reason other than the file's content."""


class StorageFullError(StorageError):
    """A write failed because the device is full or a quota is exhausted (ENOSPC, EDQUOT). Retryable: other
    processes free space (cleaning, archival, the operator), so the daemon backs off and tries again; a table that
    keeps failing is quarantined after `service.retry.quarantine_after_failures` attempts, like any retryable
    failure. Nothing partial is left behind (temp files are removed)."""


class LockError(RetryableError):
    """A lock could not be acquired in time, or was lost while held."""


class LockLostError(LockError):
    """The lock was held and then lost; whatever it protected must be abandoned."""


class LeaseHeldError(LockError):
    """Another process holds the executor lease of an action: it is running that action now."""


class ConflictError(RetryableError):
    """Another writer changed the table in a way that conflicts with this action."""


class StaleAttemptError(ConflictError):
    """A task of an attempt that has been rolled back (an orphaned Spark job) must not leave files behind."""


class SparkJobError(RetryableError):
    """A Spark job failed or was cancelled for a reason other than a task's own typed error (executor loss,
    cancellation, a bug in a task)."""


class SparkUnavailableError(RetryableError):
    """The Spark session did not start (or not yet again after a failed start): actions that need Spark wait for
    the next start; the others go on."""


class InstantNotPendingError(ConflictError):
    """The instant an action was about to execute is no longer pending: another process completed or removed it
    since it was listed. Nothing to do, and nothing failed."""


class ActionAbandonedError(ConflictError):
    """A planned action can never complete (a write it conflicts with has completed), so its plan was removed;
    a new plan may be scheduled. An expected outcome of optimistic concurrency, not a failure of the table."""


# --- permanent -------------------------------------------------------------------------------------


class FileMissingError(PermanentError):
    """A file the table's metadata refers to does not exist."""


class InvalidPathError(PermanentError):
    """A location holds characters no file system takes (a NUL byte or another control character)."""


class AlreadyExistsError(PermanentError):
    """A file that must be created fresh already exists."""


class CorruptFileError(PermanentError):
    """A file's bytes do not follow the format they claim to follow."""


class DamagedInputError(CorruptFileError):
    """Committed data an action would rewrite is incomplete or damaged: a base file a completed commit names is
    missing or has another size, a log file holds fewer bytes than its commits wrote, or a corrupt block lies inside
    a committed range. The service that found it is quarantined for the table; `instant_time` names the commit."""

    def __init__(self, problem: str, *, instant_time: str, table: str | None = None, path: str | None = None) -> None:
        super().__init__(problem, table=table, path=path)
        self.instant_time = instant_time


class InvalidTableConfigError(PermanentError):
    """`hoodie.properties` is missing, unreadable or inconsistent."""


class UnsupportedTableError(PermanentError):
    """The table uses a version or feature this project does not handle."""


class MetadataOutOfStepError(PermanentError):
    """The metadata table does not hold what storage and the timeline say it should (`table verify`)."""


class InvalidTimelineError(PermanentError):
    """The timeline holds an instant that cannot be parsed or a transition that is not allowed."""


class InvalidPlanError(PermanentError):
    """A plan or metadata file does not decode, or refers to something it must not."""


class ConfigError(PermanentError):
    """The daemon's configuration is invalid."""


class HistoryError(PermanentError):
    """The daemon's action history (an SQLite file) cannot be read."""


class SavepointError(PermanentError):
    """A savepoint was refused: the instant is unknown, pending, not a commit, already savepointed or older than
    the cleaner's window (Hudi's HoodieSavepointException). `instant_time` names the instant."""

    def __init__(self, problem: str, *, instant_time: str, table: str | None = None, path: str | None = None) -> None:
        super().__init__(problem, table=table, path=path)
        self.instant_time = instant_time


class PlanNotCancellableError(PermanentError):
    """`plan cancel` was refused: the instant is missing, completed, not a compaction, clustering or clean plan, or
    inflight (an attempt started: it must be rolled back instead)."""


class RestoreError(PermanentError):
    """A restore to a savepoint was refused: the instant is not a completed savepoint, or an instant after it cannot
    be rolled back (e.g. archived)."""


class InvalidTimeTravelError(PermanentError):
    """A time-travel or incremental bound that cannot be answered exactly: not one of Hudi's instant formats, or
    naming a snapshot the table no longer holds whole (archived, cleaned, before the first commit, at or after a
    pending write). `instant_time` is the bound as given (or normalised, once parsed)."""

    def __init__(self, problem: str, *, instant_time: str, table: str | None = None, path: str | None = None) -> None:
        super().__init__(problem, table=table, path=path)
        self.instant_time = instant_time


class StateStoreError(RetryableError):
    """The daemon's state store (the SQLite file beside its action history, holding the tables registered through
    the table-service-manager endpoint) cannot be read or written."""
