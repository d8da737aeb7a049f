"""The one error root of gpu-bisect, caught once at the CLI edge.

BisectError                  anything the operator should see as one line (exit 2 unless said otherwise)
 ├── InputError              bad flags, bad bisect.toml, unparsable --expect / --metric
 ├── RepoError               no repository, unknown ref, good not an ancestor of bad, empty range
 ├── StoreError              database unreachable, unwritable, or a migration failed
 │    └── UnknownBisectError no bisect with that id
 ├── StateError              an operation the bisect's status forbids (resume a finished bisect, ...)
 └── ExecutorError           workers could not be started (executor unavailable, Ray not reachable)
"""

from __future__ import annotations


class BisectError(Exception):
    """Base of every error that is reported to the operator as one line."""

    exit_code = 2


class InputError(BisectError):
    """The operator's input (flags, bisect.toml, expressions) does not parse or is inconsistent."""


class RepoError(BisectError):
    """The git repository or the revisions named in it cannot be used for a bisect."""


class StoreError(BisectError):
    """The result store cannot be opened, migrated or written."""


class UnknownBisectError(StoreError):
    """No bisect with the given id exists in the store."""


class StateError(BisectError):
    """The bisect is in a state that forbids the requested operation."""


class ExecutorError(BisectError):
    """The executor could not start its workers."""
