"""The test suite: folders mirror the package; shared helpers live in `tests.support`."""
