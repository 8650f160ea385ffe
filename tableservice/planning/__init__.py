"""Pure planning: timeline + file-system view + policy → plan. No I/O beyond what `tableservice.hudi` reads."""

from tableservice.planning.compaction.plan import (
    PLAN_VERSION,
    CompactionBlockedError,
    CompactionTableState,
    DueDecision,
    ResolvedOperation,
    blocking_pending_write,
    compactable_log_bytes,
    compaction_due,
    plan_compaction,
    validate_compaction_plan,
)
from tableservice.planning.compaction.policy import CompactionPolicy, CompactionStrategyName, CompactionTriggerStrategy

__all__ = [
    "PLAN_VERSION",
    "CompactionBlockedError",
    "CompactionPolicy",
    "CompactionStrategyName",
    "CompactionTableState",
    "CompactionTriggerStrategy",
    "DueDecision",
    "ResolvedOperation",
    "blocking_pending_write",
    "compactable_log_bytes",
    "compaction_due",
    "plan_compaction",
    "validate_compaction_plan",
]
