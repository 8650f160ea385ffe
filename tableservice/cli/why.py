"""Why a `schedule` command found nothing to plan, in the operator's terms: a plan already pending (and how to run
it), or what the policy looks for and did not find."""

from __future__ import annotations

from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.planning.clean.policy import CleanerPolicyName, CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy


def _pending(table: HudiTable, service: str) -> list[str]:
    timeline = table.reload()
    if service == "compaction":
        instants = list(timeline.pending_compactions())
    elif service == "clustering":
        instants = table.pending_clustering(timeline)
    else:
        instants = [i for i in timeline.pending() if i.action.value == service]
    return [f"{i.requested_time} ({i.state.name.lower()})" for i in instants]


def nothing_to_compact(table: HudiTable) -> str:
    pending = _pending(table, "compaction")
    if pending:
        return (
            f"nothing to compact: compaction {', '.join(pending)} is pending and holds the file slices it names "
            "(run it: `tableservice compact run`); no other file slice has log files"
        )
    return "nothing to compact: no file slice outside pending clustering has log files"


def nothing_to_cluster(table: HudiTable, policy: ClusteringPolicy) -> str:
    pending = _pending(table, "clustering")
    limit = f"hoodie.clustering.plan.strategy.small.file.limit = {policy.small_file_limit} bytes"
    if pending:
        return (
            f"nothing to cluster: clustering {', '.join(pending)} is pending and holds its file groups (run it: "
            f"`tableservice cluster run`); no other file group has a base file under {limit}"
        )
    return f"nothing to cluster: no file group has a base file under {limit}"


def nothing_to_clean(table: HudiTable, policy: CleanPolicy) -> str:
    pending = _pending(table, "clean")
    if pending:
        return f"nothing to clean: clean {', '.join(pending)} is pending (run it: `tableservice clean run --execute`)"
    if policy.policy is CleanerPolicyName.KEEP_LATEST_FILE_VERSIONS:
        keeps = f"the latest {policy.file_versions_retained} file versions of each file group"
    elif policy.policy is CleanerPolicyName.KEEP_LATEST_BY_HOURS:
        keeps = f"the file versions of the last {policy.hours_retained} hours"
    else:
        keeps = f"the file versions the last {policy.commits_retained} commits need"
    return f"nothing to clean: every file version is among {keeps} ({policy.policy.value})"
