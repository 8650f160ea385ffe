"""Reading the configuration file: YAML with line numbers, environment overrides, secrets refused, errors
that name the key path, the value and the line.

Environment overrides: `TABLESERVICE__<KEY>__<KEY>...=<value>` (double underscores between keys), applied
to the parsed file before validation.

- Each key matches the configuration's key at that level ignoring case, with `.`, `-` and `_` alike, so
  `TABLESERVICE__DEFAULTS__COMPACTION__HOODIE_COMPACT_INLINE_MAX_DELTA_COMMITS=10` sets
  `defaults.compaction.hoodie.compact.inline.max.delta.commits`. The exact key also works where the
  platform allows it (`TABLESERVICE__defaults__compaction__hoodie.compact.inline.max.delta.commits`).
- A number selects a list entry the file already has: `TABLESERVICE__TABLES__0__NAME=trips`.
- In free mappings (`spark.conf`) a key matches an existing key the same way, or is taken verbatim:
  `TABLESERVICE__SPARK__CONF__spark.executor.memory=4g`.
- The value is read as YAML (`10` is a number, `true` a boolean, `[a, b]` a list, `{k: v}` a mapping),
  except for keys that hold text, which take the value verbatim. An empty value means null: not set, so
  the default applies (as `null` does anywhere in the file).
- Shorter paths apply first, so `TABLESERVICE__SERVICE__HTTP__PORT` wins over a `TABLESERVICE__SERVICE={...}`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from tableservice.config.model import DaemonConfig
from tableservice.config.schema import (
    ConfigIssue,
    Loc,
    Spec,
    child,
    format_loc,
    issues_from_error,
    match_key,
    model_keys,
    suggest,
)
from tableservice.errors import ConfigError, FileMissingError, StorageError, has_url_credentials
from tableservice.storage import Storage

ENV_PREFIX = "TABLESERVICE__"

# Keys that hold credentials, under any prefix (`spark.hadoop.`, `spark.hadoop.fs.s3a.bucket.<b>.`, ...): passwords,
# AWS keys and tokens, Azure account keys (`fs.azure.account.key.<account>...`) and SAS tokens (`fs.azure.sas.*`),
# S3A encryption keys (`fs.s3a.encryption.key`, `fs.s3a.server-side-encryption.key`), GCS service-account private
# keys (`fs.gs.auth.service.account.private.key`, `.private.key.id`).
_SECRET_KEY = re.compile(
    r"secret|password|passwd|access[._-]?key|session[._-]?token|private[._-]?key|api[._-]?key|account[._-]?key"
    r"|encryption[._-]?key|(^|\.)sas(\.|$)",
    re.IGNORECASE,
)
# Keys that name secrets kept elsewhere rather than hold one (Spark on Kubernetes mounts Kubernetes secrets; the
# class that provides SAS tokens).
_SECRET_REFERENCE = re.compile(r"^spark\.kubernetes\.|secretKeyRef|\.sas\.token\.provider\.type$", re.IGNORECASE)
_AWS_KEY_ID = re.compile(r"^(AKIA|ASIA)[A-Z0-9]{16}$")
_WHERE_SECRETS_GO = (
    "credentials never go in the configuration file: use the usual AWS sources (AWS_ACCESS_KEY_ID / "
    "AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN environment variables, a profile via AWS_PROFILE, or the "
    "instance or pod role); Spark's S3A connector reads the same sources; other stores' keys and tokens (Azure, "
    "GCS, Spark Connect, ZooKeeper) come from the environment or the workload's identity too"
)
_MAX_VALUE_CHARS = 80


class ConfigValidationError(ConfigError):
    """The configuration is invalid; `issues` lists every problem with its key path."""

    def __init__(self, issues: list[ConfigIssue], *, source: str | None, lines: Mapping[Loc, int] | None = None):
        self.issues = issues
        lines = lines or {}
        rendered = [_render(i, _line_of(i.loc, lines)) for i in issues]
        if len(rendered) == 1:
            problem = rendered[0]
        else:
            problem = f"{len(rendered)} problems in the configuration:\n  " + "\n  ".join(rendered)
        super().__init__(problem, path=source)


def _line_of(loc: Loc, lines: Mapping[Loc, int]) -> int | None:
    for n in range(len(loc), 0, -1):
        line = lines.get(loc[:n])
        if line is not None:
            return line
    return None


def _render(item: ConfigIssue, line: int | None) -> str:
    where = item.path
    if item.has_value:
        text = repr(item.value)
        if len(text) > _MAX_VALUE_CHARS:
            text = text[: _MAX_VALUE_CHARS - 3] + "..."
        where += f" = {text}"
    notes = [n for n in (item.origin, f"line {line}" if line is not None and item.origin is None else None) if n]
    if notes:
        where += f" ({', '.join(notes)})"
    return f"{where}: {item.message}"


# --- YAML ----------------------------------------------------------------------------------------------------------


def parse_yaml(text: str, source: str) -> tuple[dict[str, Any], dict[Loc, int]]:
    """The document as plain data and the line (1-based) of each key path; duplicate keys are errors. Every
    YAML problem (bad characters, syntax, an alias that expands beyond `MAX_EXPANDED_NODES`) is a ConfigError
    naming the file and, when known, the line and column."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node, source)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"YAML syntax error{where}: {e.problem or e}", path=source) from None
    except yaml.reader.ReaderError as e:
        line, column = _line_column(text, e.position)
        raise ConfigError(
            f"YAML error at line {line}, column {column}: character {e.character:#06x} is not allowed ({e.reason})",
            path=source,
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"YAML error: {e}", path=source) from None
    except RecursionError:
        raise ConfigError("YAML error: the document is nested too deeply", path=source) from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"the configuration must be a mapping of sections, not {type(data).__name__}", path=source)
    lines: dict[Loc, int] = {}
    problems: list[ConfigIssue] = []
    assert node is not None
    _walk_nodes(node, (), lines, problems)
    if problems:
        raise ConfigValidationError(problems, source=source, lines=lines)
    return data, lines


# A document without aliases is as large as its text; aliases may repeat a node anywhere, and a few hundred
# bytes of nested ones ("billion laughs") expand to billions of nodes when walked and validated. A document
# with aliases may expand to this many nodes (far above any real configuration).
MAX_EXPANDED_NODES = 100_000


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse aliases that expand (as the walk and validation see them) beyond MAX_EXPANDED_NODES nodes, or
    that refer to a node containing them. Each distinct node is visited once."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the ancestors of the node being expanded
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]  # (node, its children already pushed)
    too_large: yaml.Node | None = None
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if key in sizes and not expanded:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if not expanded:
            if key in open_nodes:
                raise _alias_error(node, "an alias refers to a node that contains it", source)
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        open_nodes.discard(key)
        sizes[key] = 1 + sum(sizes[id(c)] for c in children)
        if too_large is None and sizes[key] > MAX_EXPANDED_NODES:
            too_large = node
    if too_large is not None and sizes[id(root)] > len(sizes):
        problem = f"aliases expand to more than {MAX_EXPANDED_NODES} nodes (an alias bomb?)"
        raise _alias_error(too_large, problem, source)


def _alias_error(node: yaml.Node, problem: str, source: str) -> ConfigError:
    mark = node.start_mark
    return ConfigError(f"YAML error at line {mark.line + 1}, column {mark.column + 1}: {problem}", path=source)


def _line_column(text: str, position: int) -> tuple[int, int]:
    """1-based line and column of character `position` in `text`."""
    before = text[:position]
    line_start = before.rfind("\n") + 1
    return before.count("\n") + 1, position - line_start + 1


def _walk_nodes(node: yaml.Node, loc: Loc, lines: dict[Loc, int], problems: list[ConfigIssue]) -> None:
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            line = key_node.start_mark.line + 1
            if key_node.tag != "tag:yaml.org,2002:str" or key is None:
                problems.append(ConfigIssue((*loc, str(key)), f"keys must be text (quote it) at line {line}"))
                continue
            if key in first:
                problems.append(ConfigIssue((*loc, key), f"duplicate key at line {line} (first at line {first[key]})"))
                continue
            first[key] = line
            lines[(*loc, key)] = line
            _walk_nodes(value_node, (*loc, key), lines, problems)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*loc, i)] = item.start_mark.line + 1
            _walk_nodes(item, (*loc, i), lines, problems)


# --- environment overrides --------------------------------------------------------------------------------------


def apply_env_overrides(
    data: dict[str, Any], env: Mapping[str, str], root: type[BaseModel] = DaemonConfig
) -> tuple[dict[str, Any], dict[Loc, str], list[ConfigIssue]]:
    """Apply `TABLESERVICE__...` variables to `data` (in place); returns it, the origin of each path set, and
    the problems found (each naming its variable)."""
    origins: dict[Loc, str] = {}
    problems: list[ConfigIssue] = []
    names = sorted((n for n in env if n.startswith(ENV_PREFIX)), key=lambda n: (n.count("__"), n))
    for name in names:
        segments = name[len(ENV_PREFIX) :].split("__")
        origin = f"environment variable {name}"
        if not all(segments):
            problems.append(
                ConfigIssue((), "empty key in the name (three or more underscores in a row?)", origin=origin)
            )
            continue
        if any(_SECRET_KEY.search(seg) and not _SECRET_REFERENCE.search(seg) for seg in segments):
            problems.append(ConfigIssue(_env_loc(segments), _WHERE_SECRETS_GO, origin=origin))
            continue
        found = _resolve_env_path(data, segments, root, origin)
        if isinstance(found, ConfigIssue):
            problems.append(found)
            continue
        parent, key, loc, spec = found
        raw = env[name]
        if raw.strip() == "":
            value: Any = None
        elif spec is not None and spec.is_text():
            value = raw
        else:
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError as e:
                problems.append(ConfigIssue(loc, f"value is not valid YAML: {e}", raw, origin))
                continue
        parent[key] = value  # type: ignore[index]
        origins[loc] = origin
        for other in [o for o in origins if len(o) > len(loc) and o[: len(loc)] == loc]:
            del origins[other]
    return data, origins, problems


def _resolve_env_path(
    data: dict[str, Any], segments: list[str], root: type[BaseModel], origin: str
) -> tuple[dict[str, Any] | list[Any], str | int, Loc, Spec | None] | ConfigIssue:
    node: Any = data
    spec: Spec | None = Spec(root)
    loc: Loc = ()
    for depth, segment in enumerate(segments):
        last = depth == len(segments) - 1
        key: str | int
        if isinstance(node, list):
            if not segment.isdigit() or int(segment) >= len(node):
                index: str | int = int(segment) if segment.isdigit() else segment
                return ConfigIssue((*loc, index), f"no such entry: the list has {len(node)} entries", origin=origin)
            key = int(segment)
        elif isinstance(node, dict):
            model = spec.model if spec is not None else None
            candidates = list(model_keys(model)) if model is not None else []
            candidates += [k for k in node if isinstance(k, str) and k not in candidates]
            matches = match_key(segment, candidates)
            if len(matches) > 1:
                return ConfigIssue((*loc, segment), f"ambiguous key, matches {', '.join(matches)}", origin=origin)
            if matches:
                key = matches[0]
            elif model is None and spec is not None and spec.is_free_mapping():
                key = segment
            else:
                hint = suggest(segment, candidates)
                message = "unknown key" + (f"; did you mean {hint!r}?" if hint else "")
                return ConfigIssue((*loc, segment), message, origin=origin)
        else:
            return ConfigIssue(loc, "is not a section; cannot set keys below it", node, origin)
        spec = child(spec, key) if spec is not None else None
        loc = (*loc, key)
        if last:
            return node, key, loc, spec
        if isinstance(node, dict) and node.get(key) is None:
            node[key] = [] if spec is not None and spec.is_list() else {}
        node = node[key]
    raise AssertionError("unreachable")


def _env_loc(segments: list[str]) -> Loc:
    return tuple(int(s) if s.isdigit() else s for s in segments)


# --- secrets -----------------------------------------------------------------------------------------------------


def find_secrets(data: Any, loc: Loc = ()) -> list[ConfigIssue]:
    """Keys that look like credentials, values that look like AWS access key ids and values holding credentials
    inside a URL or connect string (`user:password@`, `token=`); values are never shown."""
    out: list[ConfigIssue] = []
    if isinstance(data, dict):
        for key, value in data.items():
            k = str(key)
            if _SECRET_KEY.search(k) and not _SECRET_REFERENCE.search(k):
                out.append(ConfigIssue((*loc, k), _WHERE_SECRETS_GO))
            else:
                out.extend(find_secrets(value, (*loc, k)))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out.extend(find_secrets(value, (*loc, i)))
    elif isinstance(data, str) and _AWS_KEY_ID.match(data.strip()):
        out.append(ConfigIssue(loc, "looks like an AWS access key id; " + _WHERE_SECRETS_GO))
    elif isinstance(data, str) and has_url_credentials(data):
        out.append(ConfigIssue(loc, "holds credentials inside a URL (user:password@ or token=); " + _WHERE_SECRETS_GO))
    return out


# --- entry points ------------------------------------------------------------------------------------------------


def parse_config(
    text: str,
    *,
    source: str = "<config>",
    env: Mapping[str, str] | None = None,
    base_dir: str | None = None,
) -> DaemonConfig:
    """Validate configuration text; `env` (default: none) supplies `TABLESERVICE__...` overrides."""
    data, lines = parse_yaml(text, source)
    data, origins, problems = apply_env_overrides(data, env or {})
    if problems:
        raise ConfigValidationError(problems, source=source, lines=lines)
    secrets = find_secrets(data)
    if secrets:
        raise ConfigValidationError([_with_origin(s, origins) for s in secrets], source=source, lines=lines)
    context = {"base_dir": base_dir if base_dir is not None else os.getcwd()}
    try:
        return DaemonConfig.model_validate(_drop_nulls(data), context=context)
    except ValidationError as e:
        issues = [_with_origin(i, origins) for i in issues_from_error(e, DaemonConfig)]
        raise ConfigValidationError(issues, source=source, lines=lines) from None


def load_config(path: str, env: Mapping[str, str] | None = None, *, storage: Storage | None = None) -> DaemonConfig:
    """Read and validate the configuration file at `path` (local or s3://), with overrides from `env`
    (default: `os.environ`). Relative local paths in the file resolve against the file's folder."""
    env = os.environ if env is None else env
    store = storage if storage is not None else Storage()
    try:
        raw = store.read_bytes(path)
    except FileMissingError:
        raise ConfigError("configuration file not found", path=path) from None
    except StorageError as e:
        raise ConfigError(f"cannot read the configuration file: {e.problem}", path=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"the configuration file is not UTF-8 text (byte {e.start})", path=path) from None
    base_dir = os.path.dirname(os.path.abspath(path)) if store.is_local(path) else None
    return parse_config(text, source=path, env=env, base_dir=base_dir)


def _drop_nulls(data: Any) -> Any:
    """Null means "not set": keys holding null are left out, so their defaults apply."""
    if isinstance(data, dict):
        return {k: _drop_nulls(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [_drop_nulls(v) for v in data]
    return data


def _with_origin(item: ConfigIssue, origins: Mapping[Loc, str]) -> ConfigIssue:
    for n in range(len(item.loc), 0, -1):
        origin = origins.get(item.loc[:n])
        if origin is not None:
            return ConfigIssue(item.loc, item.message, item.value, origin)
    return item


__all__ = [
    "ENV_PREFIX",
    "MAX_EXPANDED_NODES",
    "ConfigValidationError",
    "apply_env_overrides",
    "find_secrets",
    "format_loc",
    "load_config",
    "parse_config",
    "parse_yaml",
]
