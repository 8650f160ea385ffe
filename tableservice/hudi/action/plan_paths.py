"""Resolving the file paths that plans name, refusing any that leave the table.

Compaction plans name files relative to their partition (`dataFilePath`, `deltaFilePaths`); clustering and
clean plans carry absolute paths written by whichever process made the plan (`s3a://`, `file:/`, HDFS paths).
A path that does not resolve inside the table's base path is an InvalidPlanError naming the plan file.

Plans this project writes name files by absolute location under the table's base path only (`plan_location`):
a relative path would resolve against whatever folder the executing process runs in, so such a plan could never
run and would block the service; writing one is refused with an InvalidPlanError naming the table and the path.
"""

from __future__ import annotations

import os
import posixpath

from tableservice.errors import InvalidPlanError
from tableservice.hudi.file_group.filenames import check_relative_path
from tableservice.hudi.table.fs_view import partition_location
from tableservice.storage import join, to_uri


def _strip_scheme(location: str) -> str:
    uri = to_uri(location)
    if uri.startswith("s3://"):
        return uri
    if "://" in uri:  # hdfs://host:port/path → /path
        rest = uri.split("://", 1)[1]
        return "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    return uri


def relative_to_table(base_path: str, location: str, *, plan_file: str) -> str:
    """The path of `location` relative to the base path, for absolute paths found in plans."""
    base = _strip_scheme(base_path).rstrip("/")
    loc = _strip_scheme(location)
    if not loc.startswith("s3://"):
        loc = posixpath.normpath(loc)
    if not loc.startswith(base + "/"):
        # Plans written elsewhere (another mount point, another scheme) keep the part after the table name.
        name = posixpath.basename(base)
        marker = f"/{name}/"
        if marker not in loc:
            raise InvalidPlanError(f"path {location!r} is outside the table's base path {base_path!r}", path=plan_file)
        loc = base + "/" + loc.split(marker, 1)[1]
    rel = loc[len(base) + 1 :]
    return check_relative_path(rel, what="path", source=plan_file)


def resolve_in_partition(base_path: str, partition: str, file_name: str, *, plan_file: str) -> str:
    """The location of a file a plan names relative to its partition."""
    if partition:
        check_relative_path(partition, what="partition path", source=plan_file)
    check_relative_path(file_name, what="file name", source=plan_file)
    if "/" in file_name:
        raise InvalidPlanError(f"file name {file_name!r} is not a plain file name", path=plan_file)
    return join(partition_location(base_path, partition), file_name)


def resolve_absolute(base_path: str, location: str, *, plan_file: str) -> str:
    """A plan's absolute path mapped onto this table's base path (so plans survive a table being moved)."""
    return join(base_path, relative_to_table(base_path, location, plan_file=plan_file))


def _absolute_under(base_path: str, location: str) -> bool:
    base, loc = to_uri(base_path).rstrip("/"), to_uri(location)
    if base.startswith("s3://") or loc.startswith("s3://"):
        return base.startswith("s3://") and loc.startswith(base + "/") and "/../" not in loc + "/"
    if "://" in base or "://" in loc or not (os.path.isabs(base) and os.path.isabs(loc)):
        return False
    base, loc = posixpath.normpath(base), posixpath.normpath(loc)
    return loc.startswith(base.rstrip("/") + "/")


def check_plan_location(base_path: str, location: str, *, table: str) -> str:
    """`location` itself when it is an absolute path under the table's base path; else an InvalidPlanError
    naming the table and the path (a plan holding it could only run in the folder it was made in)."""
    if not _absolute_under(base_path, location):
        raise InvalidPlanError(
            f"refusing to write a plan naming {location!r}: not an absolute path under the table's base path "
            f"{base_path!r}",
            table=table,
            path=location,
        )
    return location


def plan_location(base_path: str, location: str, *, table: str) -> str:
    """A location checked by `check_plan_location`, rendered as Hudi renders absolute paths in plans: local paths
    as `file:/...`, URIs unchanged."""
    check_plan_location(base_path, location, table=table)
    uri = to_uri(location)
    return location if "://" in location or location.startswith("file:") or uri.startswith("s3://") else "file:" + uri
