"""Every parser of untrusted bytes, fed mutations of real bytes (hypothesis picks the seed and the edits): it
returns a value or raises a TableServiceError naming the file, nothing else. Unmutated seeds decode."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tableservice.errors import TableServiceError
from tests.support.fuzz_mutators import INTERESTING_INTS, OP_KINDS, Op, apply_ops
from tests.support.fuzz_targets import Target

PARSERS = [
    "log_file",
    "avro_block",
    "parquet_block",
    "delete_block",
    "timeline",
    "archive_log",
    "lsm_history",
    "lsm_manifest",
    "hoodie_properties",
    "daemon_config",
    "hfile",
]
#: Examples per parser: about 3,300 cases in all, well under a minute on one core.
EXAMPLES = 300

OPS = st.lists(
    st.builds(
        Op,
        kind=st.integers(0, OP_KINDS - 1),
        pos=st.integers(0, 1 << 20),
        arg=st.integers(0, 6 * len(INTERESTING_INTS) * 256),
        payload=st.binary(max_size=48),
    ),
    min_size=1,
    max_size=4,
)


def _parse_or_typed_error(target: Target, index: int, data: bytes) -> object:
    try:
        return target.parse(index, data)
    except TableServiceError as e:
        assert e.path is not None, f"{target.name}: {e!r} names no file"
        return e


def test_every_parser_has_seeds(fuzz_targets: dict[str, Target]) -> None:
    assert sorted(fuzz_targets) == sorted(PARSERS)
    assert {name: bool(t.seeds) for name, t in fuzz_targets.items()} == {name: True for name in PARSERS}


@pytest.mark.parametrize("name", PARSERS)
def test_unmutated_seeds_decode(fuzz_targets: dict[str, Target], name: str) -> None:
    target = fuzz_targets[name]
    for i, seed in enumerate(target.seeds):
        first = target.parse(i, seed)
        assert target.parse(i, seed) == first  # decoding is a function of the bytes


@pytest.mark.parametrize("name", PARSERS)
def test_mutated_bytes_decode_or_raise_typed_errors(fuzz_targets: dict[str, Target], name: str) -> None:
    target = fuzz_targets[name]
    outcomes: dict[str, int] = {"decoded": 0, "typed": 0}

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(index=st.integers(0, len(target.seeds) - 1), ops=OPS)
    def check(index: int, ops: list[Op]) -> None:
        result = _parse_or_typed_error(target, index, apply_ops(target.seeds[index], ops, target.seeds))
        outcomes["typed" if isinstance(result, TableServiceError) else "decoded"] += 1

    check()
    assert outcomes["typed"] > 0, outcomes  # the mutations reach the parser's checks
