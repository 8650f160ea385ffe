"""`tableservice status`: what the running daemon reports at `/status` (running actions, holds, quarantines, last
errors, pending work), or with `--offline` what the tables themselves show. Exit 0 when every table is healthy,
1 when one is not (degraded, failing, quarantined, unreadable), 2 when the daemon cannot be asked."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from tableservice.cli.table_health import last_archived
from tableservice.config import DaemonConfig
from tableservice.errors import ConfigError, TableServiceError
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.service.wiring import status_token
from tableservice.storage import Storage

HEALTHY = frozenset({"ok"})
TIMEOUT_S = 5.0


def daemon_url(config: DaemonConfig, url: str | None) -> str:
    """Where the daemon of `config` answers: `--url`, else its configured HTTP address (a wildcard host is asked
    on loopback)."""
    if url:
        return url.rstrip("/")
    http = config.service.http
    if not http.port:
        raise ConfigError("service.http.port is 0 (any free port): say where the daemon listens with --url")
    host = "127.0.0.1" if http.host in ("0.0.0.0", "", "*") else ("::1" if http.host == "::" else http.host)
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{http.port}"


def fetch_json(config: DaemonConfig, url: str, target: str, *, offline: str = "reads the tables instead") -> Any:
    """The JSON document the daemon at `url` answers at `target` (a path and query), with the bearer token of
    `service.http.status_token_file`; ConfigError (exit 2) when it does not answer or refuses (`offline` says what
    `--offline` does instead)."""
    path = target.partition("?")[0]
    request = urllib.request.Request(f"{url}{target}", headers={"Accept": "application/json"})
    token = status_token(config.service.http)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            return json.loads(reply.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        detail = _error_detail(e)
        raise ConfigError(f"the daemon at {url} answered {path} with HTTP {e.code} {e.reason}{detail}") from e
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise ConfigError(
            f"the daemon does not answer at {url} ({reason}): is it running? `--offline` {offline}"
        ) from e
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"the daemon at {url} sent a {path} that is not JSON: {e}") from e


def _error_detail(e: urllib.error.HTTPError) -> str:
    """`: <error>` from a JSON error document the daemon sent with a refusal, else nothing."""
    try:
        document = json.loads(e.read(65536).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return ""
    return f": {document['error']}" if isinstance(document, dict) and isinstance(document.get("error"), str) else ""


def fetch_status(config: DaemonConfig, url: str) -> dict[str, Any]:
    """The daemon's /status document; ConfigError (exit 2) when it does not answer or refuses."""
    document = fetch_json(config, url, "/status")
    if not isinstance(document, dict) or not isinstance(document.get("tables"), list):
        raise ConfigError(f"the daemon at {url} sent a /status without a table list")
    return document


def with_archived_compactions(storage: Storage, document: dict[str, Any]) -> dict[str, Any]:
    """Fill in the last compaction of merge-on-read tables whose active timeline holds none any more: the newest
    archived one, read here from the newest archive files only (the daemon's polls never read the archive, so its
    /status names only compactions on the active timeline or ones it saw). A table this process cannot read keeps
    what the document said."""
    for t in document.get("tables", []):
        if not isinstance(t, dict) or t.get("last_compaction") or t.get("table_type") != "MERGE_ON_READ":
            continue
        uri = t.get("uri")
        if not isinstance(uri, str):
            continue
        try:
            found = last_archived(HudiTable.open(storage, uri), Action.COMPACTION)
        except TableServiceError:
            continue
        if found is not None:
            t["last_compaction"], t["last_compaction_archived"] = found, True
    return document


def render(document: dict[str, Any], *, as_json: bool) -> int:
    """Print the tables' state; 1 when any table is not healthy."""
    tables = [t for t in document.get("tables", []) if isinstance(t, dict)]
    unhealthy = [t for t in tables if str(t.get("health")) not in HEALTHY]
    if as_json:
        json.dump(document, sys.stdout, indent=2, default=str)
        print()
        return 1 if unhealthy else 0
    if "state" in document:
        print(
            f"daemon {document.get('version', '?')}: {document['state']}, Spark "
            f"{'up' if document.get('spark_up') else 'down'}, {document.get('running_actions', 0)} actions running"
        )
    for t in tables:
        reason = f" ({t['health_reason']})" if t.get("health_reason") else ""
        kind = f"{t.get('table_type') or '?'} v{t.get('table_version') or '?'}"
        print(f"{t.get('name')} ({t.get('uri')}): {kind}, health {t.get('health')}{reason}")
        if t.get("paused"):
            print(f"  PAUSED (no action runs): {t.get('paused_reason') or 'no reason given'}")
        if t.get("running"):
            print(f"  running {t['running']}")
        for service, info in sorted((t.get("quarantined_services") or {}).items()):
            print(f"  {service} quarantined until {info.get('until')}: {info.get('reason')}")
        for held in t.get("held_back") or []:
            print(
                f"  held back {held.get('action')} {held.get('instant')} until {held.get('until')}: {held.get('error')}"
            )
        if t.get("last_error") and t.get("health") not in HEALTHY:
            print(f"  last error: {t['last_error']}")
        for p in t.get("pending") or []:
            print(f"  pending {p['action']} {p['instant']} ({p['state']}, {float(p['age_seconds']):.0f}s old)")
        archived = " (archived)" if t.get("last_compaction_archived") else ""
        print(f"  last compaction {t.get('last_compaction') or '-'}{archived}")
        for service, due in sorted((t.get("due") or {}).items()):
            print(f"  {service}: {_when(due)}")
    if unhealthy:
        names = ", ".join(str(t.get("name")) for t in unhealthy)
        print(f"{len(unhealthy)} of {len(tables)} tables not healthy: {names}", file=sys.stderr)
    return 1 if unhealthy else 0


def _when(due: dict[str, Any]) -> str:
    """When a service next plans: now, at the moment its time trigger fires, or when new commits make it due."""
    reason = str(due.get("reason") or "")
    if due.get("due"):
        return f"due now ({reason.removeprefix('due: ')})"
    if due.get("next_due_at"):
        return (
            f"next due at {due['next_due_at']} unless commits make it due sooner ({reason.removeprefix('not due: ')})"
        )
    return reason


def add_arguments(status: argparse.ArgumentParser) -> None:
    status.add_argument("--config", required=True, help="the daemon's configuration file")
    status.add_argument("--json", action="store_true", help="print the /status document as JSON")
    status.add_argument("--url", help="where the daemon listens (default: service.http of the configuration)")
    status.add_argument(
        "--offline", action="store_true", help="read the tables themselves instead of asking the running daemon"
    )
