"""kvtier's exceptions: one class per status code, all under :class:`kvtier.Error`.

The codes are those of the C++ library and the wire protocol (``docs/protocol.md``). Where a
Python built-in exception means the same thing, the class derives from it too, so that
``except KeyError`` catches :class:`NotFound` and ``except ConnectionError`` catches
:class:`Unavailable`.
"""

from __future__ import annotations

from . import _kvtier


class Error(Exception):
    """A kvtier call failed. ``code`` is the status code's name, e.g. ``"NOT_FOUND"``.

    A batch call that failed for some items raises the error of the first failed item; its
    ``failures`` maps the index of every failed item to its error.
    """

    code: str = "UNKNOWN"
    retryable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.failures: dict[int, Error] = {}

    def __str__(self) -> str:
        return self.message


class Cancelled(Error):
    code = "CANCELLED"


class Unknown(Error):
    code = "UNKNOWN"


class InvalidArgument(Error, ValueError):
    """The request is malformed (a wrong key size, a bad buffer, an unknown URL scheme, ...)."""

    code = "INVALID_ARGUMENT"


class DeadlineExceeded(Error, TimeoutError):
    code = "DEADLINE_EXCEEDED"
    retryable = True


class NotFound(Error, KeyError):
    """No such key, tenant or object. Calls that look a key up return ``None`` instead."""

    code = "NOT_FOUND"

    def __str__(self) -> str:  # KeyError quotes its argument; kvtier's messages are prose.
        return self.message


class AlreadyExists(Error):
    code = "ALREADY_EXISTS"


class PermissionDenied(Error):
    code = "PERMISSION_DENIED"


class ResourceExhausted(Error):
    """Out of room (nothing evictable: all pinned or leased) or over a tenant's budget."""

    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(Error):
    """The system is not in the state the call needs (e.g. a closed client)."""

    code = "FAILED_PRECONDITION"


class Aborted(Error):
    code = "ABORTED"
    retryable = True


class OutOfRange(Error, ValueError):
    """A value does not fit the buffer it was to be read into."""

    code = "OUT_OF_RANGE"


class Unimplemented(Error):
    code = "UNIMPLEMENTED"


class Internal(Error):
    code = "INTERNAL"


class Unavailable(Error, ConnectionError):
    """kvtierd cannot be reached, or went away and did not come back within the retry time."""

    code = "UNAVAILABLE"
    retryable = True


class DataLoss(Error):
    code = "DATA_LOSS"


class Unauthenticated(Error, PermissionError):
    """A wrong tenant or token."""

    code = "UNAUTHENTICATED"


# Numbered as kvtier::StatusCode (include/kvtier/status.h).
_BY_CODE: dict[int, type[Error]] = {
    1: Cancelled,
    2: Unknown,
    3: InvalidArgument,
    4: DeadlineExceeded,
    5: NotFound,
    6: AlreadyExists,
    7: PermissionDenied,
    8: ResourceExhausted,
    9: FailedPrecondition,
    10: Aborted,
    11: OutOfRange,
    12: Unimplemented,
    13: Internal,
    14: Unavailable,
    15: DataLoss,
    16: Unauthenticated,
}

_kvtier._register_errors(_BY_CODE)
