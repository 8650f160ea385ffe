"""Locations given on the command line, made absolute before anything opens a table or a file.

A table opened at a relative path would write plans naming files relative to the folder the command ran in;
another process (the daemon, a later `run` from elsewhere) could never execute them. So every table URI and
configuration path is resolved here, once: bare paths and `file:` URIs become absolute local paths (against the
current folder), object-store URIs (`s3://`, `s3a://`, ...) stay as given.
"""

from __future__ import annotations

import argparse
import os

from tableservice.storage import to_uri

# The arguments that name a table or a file the command reads or writes through tableservice's storage.
LOCATION_ARGUMENTS = ("uri", "config")


def absolute_location(location: str) -> str:
    """`location` as an absolute, normalised local path, or unchanged when it is a URI of another scheme."""
    uri = to_uri(location)
    if "://" in uri:
        return location
    return os.path.normpath(os.path.abspath(uri))


def resolve_locations(args: argparse.Namespace) -> None:
    """Make the parsed location arguments absolute, keeping what was typed in `<name>_given` (a table's `uri`
    may also be its name in `--config`)."""
    for name in LOCATION_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            setattr(args, f"{name}_given", value)
            setattr(args, name, absolute_location(value))
