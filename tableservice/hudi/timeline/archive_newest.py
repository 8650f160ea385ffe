"""Reading only the newest part of the archived timeline: what a command asks of a long history (the newest
archived compaction or clean, the completion time of one archived delta commit) without reading all of it.

A table with 10,000 archived instants holds them in tens of files; a daemon's pass never reads them (its poll
takes the active timeline only), and these lookups read files newest first and stop as soon as older files
cannot change the answer:

- v8/v9 LSM history: the latest manifest lists the valid files, each named by its instant range
  (`<min>_<max>_<level>.parquet`), so files are taken by descending `max` and a file is read only while its range
  can hold a newer match (or the wanted range); only the `instantTime`, `completionTime` and `action` columns.
- v6 archive log: files are taken by descending version (Hudi's reading order). Each archival run writes a new
  version holding instants newer, per action, than every earlier version holds (commits are archived oldest
  first; cleans and rollbacks too), so once a version holds a match, or an instant older than the wanted range,
  older versions are not read. Hudi's optional merge of small archive files (`hoodie.archive.merge.enable`, off
  by default) writes old instants into a new version; after such a merge a lookup may stop early and answer with
  an older instant than the newest archived one (what `status` and `table show` print, never what a service
  acts on).
"""

from __future__ import annotations

from collections.abc import Callable

from tableservice.hudi.table.config import TableConfig
from tableservice.hudi.timeline.archive_lsm import latest_manifest, parse_lsm_file_name, read_lsm_keys
from tableservice.hudi.timeline.archive_model import ArchivedInstant
from tableservice.hudi.timeline.archive_v1 import archive_log_files, read_archive_log
from tableservice.storage import Storage, join

__all__ = ["completion_times_from", "newest_archived"]


def _folder(base_path: str, config: TableConfig) -> str:
    return join(base_path.rstrip("/"), config.history_folder)


def _lsm_files_newest_first(storage: Storage, folder: str) -> list[tuple[str, str, str]]:
    """(min, max, name) of the files the latest manifest lists, by descending max instant."""
    _, manifest = latest_manifest(storage, folder)
    out = []
    for name in manifest.file_names:
        parsed = parse_lsm_file_name(name)
        lo, hi = (parsed[0], parsed[1]) if parsed is not None else ("", "9" * 17)  # unnamed ranges: always read
        out.append((lo, hi, name))
    out.sort(key=lambda f: (f[1], f[0]), reverse=True)
    return out


def newest_archived(
    storage: Storage,
    base_path: str,
    config: TableConfig,
    match: Callable[[ArchivedInstant], bool] = lambda a: True,
) -> ArchivedInstant | None:
    """The newest completed archived instant that `match` accepts (None when none does), reading the newest files
    first (module docstring). v8/v9 instants carry no metadata or plan bytes (not read); v6 ones carry their
    entry."""
    folder = _folder(base_path, config)
    best: ArchivedInstant | None = None
    if config.layout_version >= 2:
        for _, hi, name in _lsm_files_newest_first(storage, folder):
            if best is not None and hi < best.requested_time:
                break
            for inst in read_lsm_keys(storage, join(folder, name)):
                if match(inst) and (best is None or inst.requested_time > best.requested_time):
                    best = inst
        return best
    for _, fi in archive_log_files(storage, folder):
        for inst in read_archive_log(storage, fi.location, table=config.name):
            if inst.is_completed and match(inst) and (best is None or inst.requested_time > best.requested_time):
                best = inst
        if best is not None:
            break
    return best


def completion_times_from(
    storage: Storage, base_path: str, config: TableConfig, start: str, end: str | None = None
) -> dict[str, str]:
    """Requested time -> completion time of the archived completed instants requested in [start, end) (end None:
    no upper bound), reading only the files that can hold them (module docstring). v6 instants without a recorded
    transition time are left out."""
    folder = _folder(base_path, config)
    out: dict[str, str] = {}

    def wanted(t: str) -> bool:
        return t >= start and (end is None or t < end)

    if config.layout_version >= 2:
        for lo, hi, name in _lsm_files_newest_first(storage, folder):
            if hi < start:
                break
            if end is not None and lo >= end:
                continue
            for inst in read_lsm_keys(storage, join(folder, name)):
                if wanted(inst.requested_time):
                    out.setdefault(inst.requested_time, inst.completion_time or inst.requested_time)
        return out
    for _, fi in archive_log_files(storage, folder):
        older = False
        for inst in read_archive_log(storage, fi.location, table=config.name):
            t = inst.requested_time
            older = older or t < start
            if inst.is_completed and inst.completion_time is not None and wanted(t):
                out.setdefault(t, inst.completion_time)
        if older:
            break
    return out
