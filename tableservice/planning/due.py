"""Whether a service should plan an action now, why, and when it next will be without a new write: what every
`TableService.due` answers (the pass reads it as a bool; /status shows all of it per service)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Due:
    """`due`: plan now. `reason`: the trigger's figures, in the operator's terms. `next_due_at`: the moment a time
    trigger fires if nothing else changes (None when only new commits, or nothing, make it due)."""

    due: bool
    reason: str
    next_due_at: datetime | None = None

    def __bool__(self) -> bool:
        return self.due

    def to_json(self) -> dict[str, object]:
        return {
            "due": self.due,
            "reason": self.reason,
            "next_due_at": self.next_due_at.isoformat(timespec="seconds") if self.next_due_at else None,
        }

    @classmethod
    def of(cls, pair: tuple[bool, str]) -> Due:
        """From the (due, why) pairs of the planners' trigger functions."""
        return cls(pair[0], pair[1])


NOT_DUE = Due(False, "this service never plans on its own")
