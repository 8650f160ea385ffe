"""How the daemon maintains a table's metadata table: Hudi's `hoodie.metadata.*` settings as the format layer
needs them (the configuration's `metadata` policy section fills them in)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetadataOptions:
    # `hoodie.metadata.compact.max.delta.commits`: compact the metadata table after this many delta commits.
    compact_max_delta_commits: int = 10
    # Run the metadata table's compaction and clean after the daemon's own delta commits (Hudi's writers do it
    # at the start of each write; a table whose only writer of table services is the daemon needs it here).
    maintain: bool = True
    # `hoodie.metadata.cleaner.commits.retained`-like: file slices kept per metadata file group by the clean.
    retained_file_versions: int = 2
    # `hoodie.metadata.keep.min.commits` / `max.commits`: completed metadata instants kept on the timeline.
    keep_min_commits: int = 20
    keep_max_commits: int = 30
