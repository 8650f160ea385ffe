"""The configuration of SLO-driven priority: a table's targets (`slo` in `defaults` and `tables[i].policy`), per-group
action quotas (`service.groups`) and the back-off of a table whose lock waits rise (`service.backoff`)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tableservice.config.schema import ConfigIssue, ConfigIssues
from tableservice.planning.slo import SloTargets

DAY_SECONDS = 86_400
WEEK_SECONDS = 7 * DAY_SECONDS
MAX_COUNT = 100_000  # as Hudi's counts


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class SloSettings(_Strict):
    """`slo`: how stale the table may get. Unset targets are not watched; without any, the daemon serves the table
    in oldest-first order as before. A table's `policy.slo` overrides `defaults.slo` key by key."""

    max_uncompacted_log_age_seconds: float | None = Field(default=None, gt=0, le=WEEK_SECONDS, allow_inf_nan=False)
    """Merge-on-read: the oldest delta commit not yet compacted may be at most this old."""
    max_log_files_per_file_group: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    """Merge-on-read: at most this many log files per file group (counted as delta commits since the last
    compaction, an upper bound)."""
    max_small_files: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    """At most this many file groups whose base file is below the clustering small-file limit."""
    max_pending_age_seconds: float | None = Field(default=None, gt=0, le=WEEK_SECONDS, allow_inf_nan=False)
    """The oldest pending table-service plan (compaction, clustering, clean, indexing, rollback) may be at most
    this old."""

    def targets(self) -> SloTargets:
        return SloTargets(
            max_uncompacted_log_age_seconds=self.max_uncompacted_log_age_seconds,
            max_log_files_per_file_group=self.max_log_files_per_file_group,
            max_small_files=self.max_small_files,
            max_pending_age_seconds=self.max_pending_age_seconds,
        )


class GroupSettings(_Strict):
    """One group of `service.groups`: its tables (by their `tables[i].name`) run at most `max_concurrent_actions`
    passes at once (the global `service.max_concurrent_actions` still applies)."""

    max_concurrent_actions: int = Field(ge=1, le=256)
    tables: list[str] = Field(min_length=1, max_length=100_000)

    @model_validator(mode="after")
    def _unique(self) -> GroupSettings:
        seen: set[str] = set()
        problems = []
        for i, name in enumerate(self.tables):
            if name in seen:
                problems.append(ConfigIssue(("tables", i), "listed twice in this group", name))
            seen.add(name)
        if problems:
            raise ConfigIssues(problems)
        return self


class BackoffSettings(_Strict):
    """Back off a table whose writers hold its lock long: when an action of the daemon waited longer than
    `lock_wait_seconds` for the table lock, the table's next action waits `initial_delay_seconds`, doubled each
    time it happens again (at most `max_delay_seconds`), until a pass's waits drop below it. Off when unset."""

    lock_wait_seconds: float | None = Field(default=None, gt=0, le=DAY_SECONDS, allow_inf_nan=False)
    initial_delay_seconds: float = Field(default=30.0, gt=0, le=DAY_SECONDS, allow_inf_nan=False)
    max_delay_seconds: float = Field(default=900.0, gt=0, le=DAY_SECONDS, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self) -> BackoffSettings:
        if self.max_delay_seconds < self.initial_delay_seconds:
            raise ConfigIssues(
                [
                    ConfigIssue(
                        ("max_delay_seconds",),
                        f"must be at least initial_delay_seconds ({self.initial_delay_seconds:g})",
                        self.max_delay_seconds,
                    )
                ]
            )
        return self


def check_group_members(groups: dict[str, GroupSettings]) -> None:
    """A table belongs to at most one group."""
    owner: dict[str, str] = {}
    problems = []
    for group, settings in groups.items():
        for i, name in enumerate(settings.tables):
            if name in owner and owner[name] != group:
                problems.append(ConfigIssue((group, "tables", i), f"already in group {owner[name]!r}", name))
            owner.setdefault(name, group)
    if problems:
        raise ConfigIssues(problems)


def unknown_group_tables(groups: dict[str, GroupSettings], known: Iterable[str]) -> list[ConfigIssue]:
    """Issues (under `service.groups`) for the group members that name no table listed under `tables`."""
    names = set(known)
    out = []
    for group, settings in groups.items():
        missing = [name for name in settings.tables if name not in names]
        if missing:
            out.append(
                ConfigIssue(
                    ("service", "groups", group, "tables"),
                    f"unknown tables {', '.join(repr(m) for m in missing)}: a group names tables by the `name` "
                    "they have under `tables`",
                    missing,
                )
            )
    return out


def group_of(groups: dict[str, GroupSettings], name: str) -> tuple[str, int] | None:
    """The group a table is in and the group's quota, or None."""
    for group, settings in groups.items():
        if name in settings.tables:
            return group, settings.max_concurrent_actions
    return None
