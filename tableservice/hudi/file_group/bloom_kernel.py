"""The compiled Murmur bloom kernel (`_bloom_murmur.c`), loaded with ctypes, and the word on whether it is there.

The package's build compiles `_bloom_murmur.c` into a shared library beside this module (an optional build step:
without a C compiler the package still installs). When the library is missing or cannot be loaded, or
`TABLESERVICE_BLOOM_KERNEL=numpy` is set, `murmur_set` declines and bloom_hash.py's numpy path sets the bits: the
same bits, about four times slower (`bench/bloom.py` measures both: 3.8x-4.1x). `status()` says which one is in
use and why.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["ENV_VAR", "available", "murmur_set", "status"]

ENV_VAR = "TABLESERVICE_BLOOM_KERNEL"
_NAME = "_bloom_murmur"
_ERR_KEY_LENGTH = -2
_ABI = 1  # KERNEL_ABI in _bloom_murmur.c
_log = logging.getLogger(__name__)


def _library_path() -> Path | None:
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"{_NAME}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def _load() -> tuple[ctypes.CDLL | None, str]:
    if os.environ.get(ENV_VAR, "").strip().lower() == "numpy":
        return None, f"numpy (the compiled kernel is turned off by {ENV_VAR}=numpy)"
    path = _library_path()
    if path is None:
        return None, f"numpy (no compiled {_NAME} library beside {Path(__file__).name}: the build had no C compiler?)"
    try:
        lib = ctypes.CDLL(str(path))
        fn = lib.tableservice_bloom_murmur_set
        abi = int(lib.tableservice_bloom_kernel_abi())
    except (OSError, AttributeError) as e:
        return None, f"numpy (the compiled kernel {path} cannot be loaded: {e})"
    if abi != _ABI:
        return None, f"numpy (the compiled kernel {path} is of calling convention {abi}, not {_ABI}: a stale build)"
    fn.argtypes = [
        ctypes.c_void_p,  # data
        ctypes.c_int64,  # data_size
        ctypes.c_void_p,  # starts
        ctypes.c_int64,  # n
        ctypes.c_int32,  # length
        ctypes.c_int32,  # nb_hash
        ctypes.c_uint32,  # vector_size
        ctypes.c_void_p,  # rows (uint8_t *const *)
        ctypes.c_int64,  # row_count
        ctypes.c_void_p,  # targets or NULL
    ]
    fn.restype = ctypes.c_int
    return lib, f"compiled ({path.name})"


_LIB, _STATUS = _load()
if _LIB is None:
    _log.warning("bloom filters are built in %s", _STATUS)


def available() -> bool:
    """Whether the compiled kernel is loaded (and not turned off)."""
    return _LIB is not None


def status() -> str:
    """Which kernel builds bloom filters, and why the numpy one when it is."""
    return _STATUS


def murmur_set(
    data: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    length: int,
    nb_hash: int,
    vector_size: int,
    rows: Sequence[npt.NDArray[np.uint8]],
    targets: npt.NDArray[np.int64] | None,
) -> bool:
    """Set the Murmur bits of keys of `length` bytes each, key i being `data[starts[i]:starts[i] + length]`, in the
    packed bit vectors `rows`: key i's in `rows[targets[i]]` (in `rows[0]` without `targets`). False, having set
    nothing, when the compiled kernel is not in use or does not take keys this long (over 259 bytes): the caller
    sets them itself."""
    if _LIB is None:
        return False
    n = len(starts)
    if n == 0:
        return True
    nbytes = (vector_size + 7) // 8
    for row in rows:
        if row.dtype != np.uint8 or row.shape != (nbytes,) or not row.flags.c_contiguous or not row.flags.writeable:
            raise ValueError(f"a packed bit vector of {vector_size} bits must be {nbytes} writable contiguous bytes")
    keys = np.ascontiguousarray(data, dtype=np.uint8)
    at = np.ascontiguousarray(starts, dtype=np.int64)
    which = None if targets is None else np.ascontiguousarray(targets, dtype=np.int64)
    if which is not None and which.shape != (n,):
        raise ValueError(f"{n} keys need {n} row indexes, got shape {which.shape}")
    pointers = (ctypes.c_void_p * len(rows))(*[row.ctypes.data for row in rows])
    code = _LIB.tableservice_bloom_murmur_set(
        keys.ctypes.data,
        keys.size,
        at.ctypes.data,
        n,
        length,
        nb_hash,
        vector_size,
        ctypes.cast(pointers, ctypes.c_void_p),
        len(rows),
        None if which is None else which.ctypes.data,
    )
    if code == _ERR_KEY_LENGTH:
        return False
    if code != 0:
        raise ValueError(
            f"bloom kernel refused its arguments (code {code}): {n} keys of {length} bytes in {keys.size} bytes, "
            f"{nb_hash} hashes, {vector_size} bits, {len(rows)} rows"
        )
    return True
