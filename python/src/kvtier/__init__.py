"""kvtier: the Python client of kvtierd, the tiered, shared, persistent KV-cache store.

- :class:`Client`: the native protocol over TCP, TLS or the daemon's Unix socket; a
  thread-safe pool that releases the GIL and moves values without copies.
- :class:`ShmClient`: the shared-memory fast path on the same host.
- :class:`Namespace`, :func:`block_keys`, :func:`opaque_key`, :func:`named_key`,
  :func:`state_key`: the keys of the C++ library, byte for byte (``docs/block_keys.md``).
- State beside KV for hybrid, sliding-window and sparse-attention models:
  :meth:`Client.put_atomic`, :meth:`Client.lookup_resume`, :class:`StateGroup`, :class:`Role`
  (``docs/state.md``).
- :mod:`kvtier.lmcache`: LMCache on kvtier (MP-mode ``native_plugin`` and in-process
  ``kvtier://`` remote connector).
- :mod:`kvtier.sglang`: SGLang HiCache's L3 storage backend.
- :mod:`kvtier.vllm`: a secondary tier of vLLM's OffloadingConnector.
- :mod:`kvtier.hf`: Hugging Face transformers caches as kvtier blocks, and back.

Errors are :class:`Error` subclasses named after the status codes (:class:`NotFound`,
:class:`Unavailable`, ...); see ``docs/python.md``.
"""

from __future__ import annotations

from . import _kvtier
from ._client import Client, ShmAllocation, ShmBuffer, ShmClient, ShmLease
from ._errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    Error,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
)
from ._hints import session_id
from ._kvtier import Namespace
from ._types import (
    DeletionReport,
    PrefixMatch,
    ResumeMatch,
    Role,
    ServerInfo,
    StateGroup,
    Tier,
)

__version__ = "0.1.0"


def block_keys(namespace: Namespace, tokens: object) -> list[bytes]:
    """The 32-byte keys of every full block of ``tokens`` (a sequence of ints, or a numpy
    array / buffer of uint32, int32 or int64 token ids) in ``namespace``: a SHA-256 chain,
    the same bytes as the C++ library. Trailing tokens that do not fill a block get no key."""
    keys: list[bytes] = _kvtier.block_keys(namespace, tokens)
    return keys


def opaque_key(namespace: Namespace, engine_hash: bytes | str | int) -> bytes:
    """The kvtier key of an engine's own block hash (bytes, a str as UTF-8, or an int of at
    most 64 bits as 8 little-endian bytes), scoped to ``namespace``."""
    key: bytes = _kvtier.opaque_key(namespace, engine_hash)
    return key


def named_key(name: bytes | str) -> bytes:
    """The key kvtierd gives a value stored under a name: a RESP key, or an LMCache L2 key
    string (``SHA256("kvtier/resp/v1" || name)``), within the storing tenant."""
    key: bytes = _kvtier.named_key(name)
    return key


def state_key(block_key: bytes, group: str) -> bytes:
    """The key of state group ``group``'s value at the block ``block_key``
    (``SHA256("kvtier/state/v1" || block_key || u32 len(group) || group)``; ``docs/state.md``).
    Group names are 1 to 128 letters, digits and ``._-:/@``."""
    key: bytes = _kvtier.state_key(block_key, group)
    return key


__all__ = [
    "Aborted",
    "AlreadyExists",
    "Cancelled",
    "Client",
    "DataLoss",
    "DeadlineExceeded",
    "DeletionReport",
    "Error",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "Namespace",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "PrefixMatch",
    "ResourceExhausted",
    "ResumeMatch",
    "Role",
    "ServerInfo",
    "ShmAllocation",
    "ShmBuffer",
    "ShmClient",
    "ShmLease",
    "StateGroup",
    "Tier",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "block_keys",
    "named_key",
    "opaque_key",
    "session_id",
    "state_key",
]
