"""One name per table in the daemon: the `name` the configuration gives it, else its `hoodie.table.name`.

That name labels the table's metrics, log lines, `/status` entry and every command's output, so two tables
must never share it: Hudi writers often reuse `hoodie.table.name` across environments (`trips` in two buckets),
and the metrics of both would silently add up. Duplicates are refused with both URIs named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tableservice.config.model import TableEntry
from tableservice.errors import ConfigError, TableServiceError
from tableservice.hudi.table.config import parse_table_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage


@dataclass(frozen=True)
class NameClash:
    """Two tables that would carry the same name: `uri` is refused, `other` keeps it."""

    name: str
    uri: str
    other: str

    def __str__(self) -> str:
        return (
            f"tables {self.other} and {self.uri} are both named {self.name!r} (metrics, logs and /status would mix "
            f"them up): give one of them another `name` in the configuration"
        )


def hoodie_table_name(storage: Storage, properties: Mapping[str, bytes] | None = None) -> Callable[[str], str | None]:
    """Reads `hoodie.table.name` from a table's `hoodie.properties`; None when it cannot be read (the table's
    worker reports why when it serves the table). `properties`: the files discovery read already (by URI), used
    instead of a second read when they parse."""

    def read(uri: str) -> str | None:
        text = None if properties is None else properties.get(uri)
        if text is not None:
            try:
                return parse_table_config(text, path=uri).name or None
            except TableServiceError:
                pass  # read again, with the fallback to the backup file
        try:
            return HudiTable.open(storage, uri).name or None
        except TableServiceError:
            return None

    return read


def named_tables(
    entries: Iterable[TableEntry],
    table_name: Callable[[str], str | None],
    *,
    taken: Mapping[str, str] | None = None,
) -> tuple[list[TableEntry], list[NameClash]]:
    """Every entry with its name filled in (configured, else `hoodie.table.name`, else the URI), and the entries
    refused because their name is already used: by a table served now (`taken`: name -> URI, which keeps it),
    by a configured name, or by an entry earlier in the list. Only tables not served yet have their
    `hoodie.properties` read (a discovery rescan of a thousand served tables reads none)."""
    owners: dict[str, str] = dict(taken or {})
    known = {uri: name for name, uri in owners.items()}  # a table served now keeps its name: no read
    listed = list(entries)
    clashes: list[NameClash] = []
    # configured names first: they are the operator's choice and win over names read from the tables
    ordered = sorted(enumerate(listed), key=lambda pair: (pair[1].name is None, pair[0]))
    chosen: dict[int, TableEntry] = {}
    for index, entry in ordered:
        name = entry.name or known.get(entry.uri) or table_name(entry.uri) or entry.uri
        owner = owners.get(name)
        if owner is not None and owner != entry.uri:
            clashes.append(NameClash(name, entry.uri, owner))
            continue
        owners[name] = entry.uri
        chosen[index] = entry if entry.name == name else entry.model_copy(update={"name": name})
    out = [chosen[i] for i in sorted(chosen)]
    return out, clashes


def resolve_named_tables(entries: Iterable[TableEntry], storage: Storage) -> list[TableEntry]:
    """`named_tables` for a start or a command: a clash is a configuration error naming both URIs."""
    named, clashes = named_tables(entries, hoodie_table_name(storage))
    if clashes:
        raise ConfigError("; ".join(str(c) for c in clashes))
    return named
