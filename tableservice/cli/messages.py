"""How the command line words an error: what kind of problem it is in plain words, never a class name, and
whether trying again may help."""

from __future__ import annotations

from tableservice.errors import (
    AlreadyExistsError,
    ConfigError,
    ConflictError,
    CorruptFileError,
    DamagedInputError,
    FileMissingError,
    InvalidPathError,
    InvalidPlanError,
    InvalidTableConfigError,
    InvalidTimelineError,
    LeaseHeldError,
    LockError,
    MetadataOutOfStepError,
    SparkJobError,
    StorageError,
    TableServiceError,
    UnsupportedTableError,
)

# Most specific first: the first class an error is an instance of names it.
_KINDS: tuple[tuple[type[TableServiceError], str], ...] = (
    (DamagedInputError, "damaged committed data"),
    (CorruptFileError, "corrupt file"),
    (FileMissingError, "missing file"),
    (InvalidPathError, "invalid path"),
    (AlreadyExistsError, "already exists"),
    (InvalidPlanError, "invalid plan"),
    (InvalidTableConfigError, "table configuration"),
    (UnsupportedTableError, "not supported"),
    (MetadataOutOfStepError, "metadata table out of step"),
    (InvalidTimelineError, "timeline"),
    (ConfigError, "configuration error"),
    (LeaseHeldError, "busy"),
    (LockError, "lock"),
    (ConflictError, "conflict"),
    (SparkJobError, "Spark job failed"),
    (StorageError, "storage"),
)


def describe(error: TableServiceError) -> str:
    """`<kind>: <the error's text>`, with a hint when trying again may help."""
    kind = next((words for cls, words in _KINDS if isinstance(error, cls)), "error")
    hint = " (this may pass on a later try)" if error.retryable and not isinstance(error, LeaseHeldError) else ""
    return f"{kind}: {error}{hint}"


def kind_class(words: str) -> type[TableServiceError] | None:
    """The error class `describe` words as `words` (for tools that read the command line's output)."""
    return next((cls for cls, kind in _KINDS if kind == words), None)
