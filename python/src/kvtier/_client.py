"""Client and ShmClient: kvtierd from Python, over the C++ client (the _kvtier extension)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, Literal, TypeVar

from . import _kvtier
from ._errors import Error, InvalidArgument, Unavailable
from ._types import DeletionReport, PrefixMatch, ResumeMatch, Role, ServerInfo, StateGroup, Tier

#: Anything with the buffer protocol (bytes, bytearray, memoryview, numpy arrays, mmap) or a
#: CPU torch tensor, contiguous.
Buffer = Any
#: A 32-byte key: from :func:`kvtier.block_keys`, :func:`kvtier.opaque_key` or
#: :func:`kvtier.named_key`.
Key = bytes | bytearray | memoryview
#: A KV element type: "bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2", or a torch dtype.
Dtype = Any

_DEFAULT_SOCKET = "kvtier-data/kvtierd.sock"
#: A session's priority in :meth:`Client.hint_session`.
SessionPriority = Literal["low", "normal", "high"]


def parse_url(url: str) -> tuple[str, bool]:
    """Returns the C++ endpoint of a kvtier URL and whether it speaks TLS.

    ``unix:///abs/path``, ``unix://relative/path``, ``tcp://host:port``, ``tls://host:port``.
    """
    if url.startswith("unix://"):
        path = url[len("unix://") :]
        if not path:
            raise InvalidArgument(f"{url!r} names no socket path")
        return "unix:" + path, False
    for scheme, tls in (("tcp://", False), ("tls://", True)):
        if url.startswith(scheme):
            address = url[len(scheme) :]
            if ":" not in address:
                raise InvalidArgument(f"{url!r} is not {scheme}host:port")
            return address, tls
    scheme = url.split("://", 1)[0] if "://" in url else url
    raise InvalidArgument(
        f"unknown kvtier URL {url!r} (scheme {scheme!r}): use unix://PATH, tcp://HOST:PORT "
        "or tls://HOST:PORT"
    )


def _dtype_code(dtype: Dtype | None) -> int:
    return 0 if dtype is None else int(_kvtier.dtype_code(dtype))


def _parents(keys: Sequence[Key], parents: Sequence[Key | None] | None, chain: bool) -> Any:
    if chain:
        if parents is not None:
            raise InvalidArgument("give parents or chain=True, not both")
        return [None, *keys[:-1]] if keys else []
    return parents


def _roles(keys: Sequence[Key], role: Role | Sequence[Role]) -> list[int] | None:
    if isinstance(role, int):
        return None if role == Role.KV else [int(role)] * len(keys)
    roles = [int(r) for r in role]
    if len(roles) != len(keys):
        raise InvalidArgument(f"{len(keys)} keys but {len(roles)} roles")
    return roles


def raise_failures(results: list[Any]) -> list[Any]:
    """Raises the first per-item error of a batch result (with all of them in ``failures``)."""
    failures = {i: r for i, r in enumerate(results) if isinstance(r, Error)}
    if failures:
        first = failures[min(failures)]
        first.failures = failures
        raise first
    return results


_Self = TypeVar("_Self", bound="_BlockClient")


class _BlockClient:
    """What Client and ShmClient share: puts, get_into, closing, context management."""

    _takes_engine_hashes = False

    _impl: Any

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection (once calls in flight on other threads return)."""
        self._impl.close()

    def put(
        self,
        key: Key,
        value: Buffer,
        *,
        parent: Key | None = None,
        session: int = 0,
        dtype: Dtype | None = None,
    ) -> None:
        """Stores one block. A key already stored is left as it is (blocks are immutable).

        ``parent`` is the previous block of the same prompt (chains are evicted tail first),
        ``session`` groups blocks for deletion by session, ``dtype`` lets compression split
        the KV byte planes.
        """
        raise_failures(self._impl.put_many([key], [value], [parent], session, _dtype_code(dtype)))

    def put_many(
        self,
        keys: Sequence[Key],
        values: Sequence[Buffer],
        *,
        parents: Sequence[Key | None] | None = None,
        chain: bool = False,
        session: int = 0,
        dtype: Dtype | None = None,
        engine_hashes: Sequence[int | bytes | None] | None = None,
        role: Role | Sequence[Role] = Role.KV,
    ) -> None:
        """Stores blocks, read straight from ``values`` (no intermediate copy).

        ``chain=True`` makes each key the parent of the next (the blocks of one prompt, in
        order); or give one parent (or None) per key. ``engine_hashes`` (one per key, or None:
        an int below 2**64 or 1 to 32 bytes, such as vLLM's block hashes) name the blocks in
        kvtierd's KV events as the engine does (:class:`Client` only). ``role`` (one, or one
        per key; :class:`Client` only) says what the blocks hold (``docs/state.md``). Raises the
        first failed item's error, with every failure in its ``failures``; the other blocks
        are stored.
        """
        args = [keys, values, _parents(keys, parents, chain), session, _dtype_code(dtype)]
        roles = _roles(keys, role)
        if engine_hashes is not None or roles is not None:
            if not self._takes_engine_hashes:
                raise InvalidArgument("engine hashes and roles travel only with kvtier.Client")
            args += [engine_hashes, roles]
        raise_failures(self._impl.put_many(*args))

    def get_into(self, keys: Sequence[Key], buffers: Sequence[Buffer]) -> list[int | None]:
        """Reads each block straight into its buffer (writable, contiguous, at least as large as
        the block) and returns its size, or None when it is not stored (the buffer is then not
        written). :class:`kvtier.OutOfRange` for a block larger than its buffer.
        """
        return raise_failures(self._impl.get_into(keys, buffers))


class Client(_BlockClient):
    """A connection pool to kvtierd over its native protocol (TCP, TLS or its Unix socket).

    ``url`` is ``unix://PATH`` (the daemon's socket; ``unix:///abs/path`` for an absolute path),
    ``tcp://HOST:PORT`` or ``tls://HOST:PORT``. ``token`` authenticates: it selects the tenant
    that owns it (give ``tenant`` as well to name it). Without a token, a client on the Unix
    socket or loopback acts for the daemon's anonymous tenant (``default`` out of the box).

    One Client may be shared by any number of threads: calls are pipelined over
    ``connections`` connections and every call that waits releases the GIL. When kvtierd
    restarts, calls that are safe to repeat (all but :meth:`pin` and :meth:`unpin`) reconnect
    and retry for up to ``retry_timeout`` seconds before raising :class:`kvtier.Unavailable`.
    No call waits forever: a connection on which a request has waited ``io_timeout`` seconds
    with no byte moving (a stopped or hung kvtierd, a cut link) is closed, and the request
    retried as above (``io_timeout=0``: no limit).

    Values cross without copies: :meth:`put_many` sends straight from the given buffers and
    :meth:`get_into` receives straight into them. Errors are :class:`kvtier.Error` subclasses
    named after the status codes; a missing key is ``None``, never an exception.
    """

    _takes_engine_hashes = True

    def __init__(
        self,
        url: str = "unix://" + _DEFAULT_SOCKET,
        token: str | None = None,
        *,
        tenant: str | None = None,
        connections: int = 1,
        retry_timeout: float = 10.0,
        io_timeout: float = 120.0,
        client_name: str = "kvtier-python",
        tls_ca_file: str | None = None,
        tls_verify: bool = True,
        tls_server_name: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
    ) -> None:
        endpoint, tls = parse_url(url)
        if connections < 1:
            raise InvalidArgument("connections must be at least 1")
        if retry_timeout < 0:
            raise InvalidArgument("retry_timeout must not be negative")
        if io_timeout < 0:
            raise InvalidArgument("io_timeout must not be negative")
        self.url = url
        self._impl = _kvtier._Client(
            endpoint,
            tenant or "",
            token or "",
            client_name,
            connections,
            int(retry_timeout * 1000),
            int(io_timeout * 1000),
            tls,
            tls_ca_file or "",
            tls_verify,
            tls_server_name or "",
            tls_cert_file or "",
            tls_key_file or "",
        )

    @property
    def server_info(self) -> ServerInfo:
        """The daemon's name, the tenant this client acts for, and its limits."""
        return ServerInfo(**self._impl.server_info())

    def ping(self) -> None:
        """One round trip to kvtierd."""
        self._impl.ping()

    def get(self, key: Key) -> bytes | None:
        """The block's bytes, or None when it is not stored. A new ``bytes`` each call: for blocks
        of megabytes, :meth:`get_into` a buffer you reuse saves an allocation and a copy."""
        value: bytes | None = raise_failures(self._impl.get_many([key]))[0]
        return value

    def get_many(self, keys: Sequence[Key]) -> list[bytes | None]:
        """The blocks' bytes (None for each key not stored)."""
        return raise_failures(self._impl.get_many(keys))

    def exists(self, key: Key) -> bool:
        """Whether the block is stored (on any tier). Counts as an access, like a lookup."""
        return self.exists_many([key])[0] is not None

    def exists_many(self, keys: Sequence[Key]) -> list[Tier | None]:
        """For each key, the tier that holds it, or None."""
        result: list[Tier | None] = self._impl.exists_many(keys)
        return result

    def lookup_prefix(
        self,
        keys: Sequence[Key] | None = None,
        *,
        namespace: _kvtier.Namespace | None = None,
        tokens: Sequence[int] | Buffer | None = None,
    ) -> PrefixMatch:
        """How many leading blocks of a prompt are stored, and where; stops at the first miss.

        Give the prompt's keys, or its ``tokens`` and ``namespace`` (the keys are then derived
        as :func:`kvtier.block_keys` does; a trailing partial block is not looked up).
        """
        if tokens is not None:
            if keys is not None or namespace is None:
                raise InvalidArgument("give keys, or tokens with a namespace")
            keys = _kvtier.block_keys(namespace, tokens)
        elif keys is None:
            raise InvalidArgument("give keys, or tokens with a namespace")
        num_blocks, tiers = self._impl.lookup_prefix(keys)
        return PrefixMatch(num_blocks, tiers)

    def put_atomic(
        self,
        keys: Sequence[Key],
        values: Sequence[Buffer],
        *,
        parents: Sequence[Key | None] | None = None,
        chain: bool = False,
        session: int = 0,
        dtype: Dtype | None = None,
        role: Role | Sequence[Role] = Role.KV,
    ) -> None:
        """Stores every block or none, and readers see all of them or none: a boundary's KV
        block with its state values (:func:`kvtier.state_key`, ``role`` :attr:`Role.STATE`,
        the block as parent). One request: at most ``server_info.max_batch`` blocks and
        ``max_frame_bytes`` in all (put the earlier blocks of a long prompt with
        :meth:`put_many` first). Raises the error that stopped it (:class:`InvalidArgument`
        for a bad value or a state value without a parent, :class:`FailedPrecondition` for one
        whose block is not stored, :class:`ResourceExhausted` when DRAM cannot hold them)."""
        roles = _roles(keys, role)
        self._impl.put_atomic(
            keys, values, _parents(keys, parents, chain), session, _dtype_code(dtype), roles
        )

    def lookup_resume(
        self,
        keys: Sequence[Key],
        groups: Sequence[StateGroup],
        *,
        keys_per_block: int = 1,
        all_lengths: bool = False,
    ) -> ResumeMatch:
        """The longest prefix of a prompt an engine can resume from: the KV of its blocks
        (``keys_per_block`` keys each; a block's state values hang off its first key) and, for
        each group, the values its window needs at the boundary. Never a length whose state is
        missing. ``all_lengths`` also lists every resumable length. Counts as an access."""
        d = self._impl.lookup_resume(
            keys, keys_per_block, [(g.name, g.window_blocks) for g in groups], all_lengths
        )
        return ResumeMatch(**d)

    def delete(self, key: Key) -> bool:
        """Deletes the block from every tier; False when it was not stored."""
        return bool(self.delete_many([key])[0])

    def delete_many(self, keys: Sequence[Key]) -> list[bool]:
        """Deletes blocks; for each, whether it was stored."""
        return raise_failures(self._impl.delete_many(keys))

    def delete_session(self, session: int) -> DeletionReport:
        """Deletes every block this tenant put with ``session``, on every tier."""
        return DeletionReport(**self._impl.delete_session(session))

    def hint_session(
        self,
        session: int,
        *,
        retain_s: int = 0,
        finished: bool = False,
        priority: SessionPriority | None = None,
    ) -> None:
        """Tells kvtierd what the caller knows of one of this tenant's sessions.

        ``retain_s``: the session comes back within this many seconds (an agent waits on a
        tool call): its DRAM blocks are evicted after the tenant's others until then, and
        kept past that time for as long again (overdue: due back any moment).
        ``priority``: ``"low"`` (evicted first, after finished sessions), ``"normal"`` or
        ``"high"`` (evicted last, as a retained session); it holds for the session's later
        blocks too. ``finished``: the session is over, its blocks go first (alone).

        A hint orders evictions and nothing else: within the tenant when tenants have
        budgets, across tenants sharing DRAM without them (docs/store.md, "Session hints").
        Raises :class:`NotFound` when no block of the session is in DRAM,
        :class:`InvalidArgument` for an empty or contradictory hint or one past
        ``memory.max_hint_retain_seconds``.
        """
        self._impl.hint_session(session, retain_s, finished, priority)

    def delete_all(self) -> DeletionReport:
        """Deletes every block of this client's tenant, on every tier."""
        return DeletionReport(**self._impl.delete_all())

    def flush(self) -> int:
        """Makes this tenant's blocks durable: once it returns, every block put before the call
        survives a crash of kvtierd (``kill -9``; power loss too with ``[disk] durability =
        "synced"``), unless deleted or evicted before it. Returns how many blocks it wrote to
        G3; :class:`kvtier.FailedPrecondition` when kvtierd has no G3."""
        written: int = self._impl.flush()
        return written

    def pin(self, keys: Sequence[Key]) -> None:
        """Keeps the blocks from eviction and expiry until :meth:`unpin`. Pins nest."""
        raise_failures(self._impl.pin_many(keys, True))

    def unpin(self, keys: Sequence[Key]) -> None:
        """Undoes one :meth:`pin` of each block (:class:`kvtier.FailedPrecondition` if none)."""
        raise_failures(self._impl.pin_many(keys, False))

    def prefetch(self, keys: Sequence[Key]) -> None:
        """A hint that these blocks will be read soon."""
        self._impl.prefetch(keys)

    def stats(self) -> dict[str, Any]:
        """Counters of this client's tenant: ``blocks``, ``bytes``, ``hits``, ``misses``,
        ``puts``, ``evictions``, ... and ``tenant``, its name."""
        result: dict[str, Any] = self._impl.stats()
        return result


class ShmLease:
    """Blocks read through shared memory: read-only memoryviews straight into kvtierd's G2
    arena, valid until the lease is released (leaving the ``with`` block, or
    :meth:`release`). kvtierd keeps their bytes unchanged meanwhile, even if the blocks are
    deleted or evicted. Views are released with the lease; one still exported (an array made
    from it) keeps :meth:`release` from ending the lease, with :class:`BufferError`.

    A restart or upgrade of kvtierd ends every lease (the new kvtierd may reuse the memory):
    :attr:`valid` is then False, and :meth:`copy_into` raises :class:`kvtier.Unavailable`
    instead of returning what may be another block's bytes. The client reconnects by itself
    for its next call.
    """

    def __init__(self, lease: Any) -> None:
        self._lease = lease
        self._views: list[memoryview] = []

    def __enter__(self) -> ShmLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __len__(self) -> int:
        return len(self._lease)

    def __getitem__(self, i: int) -> memoryview | None:
        """Block ``i`` as one read-only memoryview, or None when it is not stored. A block
        stored in several pieces of the arena raises :class:`BufferError`: use :meth:`pieces`
        or :meth:`copy_into`."""
        if not self._found(i):
            return None
        views = self.pieces(i)
        if len(views) != 1:
            raise BufferError(
                f"block {i} is stored in {len(views)} pieces: use pieces() or copy_into()"
            )
        return views[0]

    def __iter__(self) -> Iterator[memoryview | None]:
        return (self[i] for i in range(len(self)))

    def _found(self, i: int) -> bool:
        error = self._lease.status(i)
        if error is None:
            return True
        if error.code == "NOT_FOUND":
            return False
        raise error

    def pieces(self, i: int) -> list[memoryview]:
        """Block ``i`` as its pieces in the arena, in order (usually one)."""
        if not self._found(i):
            raise KeyError(i)
        views: list[memoryview] = self._lease.views(i)
        self._views.extend(views)
        return views

    def size(self, i: int) -> int | None:
        """Block ``i``'s size, or None when it is not stored."""
        return int(self._lease.size(i)) if self._found(i) else None

    def copy_into(self, i: int, buffer: Buffer) -> int | None:
        """Copies block ``i`` into ``buffer`` and returns its size (None: not stored)."""
        if not self._found(i):
            return None
        out = memoryview(buffer).cast("B")
        offset = 0
        for view in self.pieces(i):
            out[offset : offset + len(view)] = view
            offset += len(view)
        if not self.valid:
            raise Unavailable(
                "kvtierd closed the connection that held the lease (a restart or an upgrade): "
                "the copy may hold other bytes than the block's; read it again"
            )
        return offset

    @property
    def released(self) -> bool:
        return bool(self._lease.released)

    @property
    def valid(self) -> bool:
        """Whether the lease still holds: True means every view read before this call showed
        the blocks' own bytes. False once released, or once kvtierd closed the connection that
        holds it (a restart or an upgrade)."""
        return bool(self._lease.valid)

    def release(self) -> None:
        """Ends the lease; every view of it is released first (BufferError, and the lease kept,
        while one of them is still exported)."""
        if self._lease.released:
            return
        for view in self._views:
            view.release()
        self._views.clear()
        self._lease.release()


class ShmAllocation:
    """Room for one block in kvtierd's G2 arena, to be filled in place through writable
    memoryviews and published by :meth:`commit` (leaving the ``with`` block without an
    exception commits; with one, it aborts). Nobody sees the block before the commit, and its
    views are released by it: a committed block cannot be changed.
    """

    def __init__(self, client: ShmClient, allocation: Any) -> None:
        self._client = client
        self._a = allocation
        self._views: list[memoryview] = []

    def __enter__(self) -> ShmAllocation:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._a.ended:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    @property
    def size(self) -> int:
        return int(self._a.size)

    def pieces(self) -> list[memoryview]:
        """Where the block's bytes go, in order; their sizes add up to :attr:`size`."""
        views: list[memoryview] = self._a.views()
        self._views.extend(views)
        return views

    @property
    def view(self) -> memoryview:
        """The whole block as one writable memoryview (BufferError when it is in pieces)."""
        views = self.pieces()
        if len(views) != 1:
            raise BufferError(f"the allocation is in {len(views)} pieces: use pieces()")
        return views[0]

    def write(self, value: Buffer) -> None:
        """Copies ``value`` (exactly :attr:`size` bytes) into the allocation."""
        data = memoryview(value).cast("B")
        if len(data) != self.size:
            raise InvalidArgument(f"value of {len(data)} bytes for an allocation of {self.size}")
        offset = 0
        for view in self.pieces():
            view[:] = data[offset : offset + len(view)]
            offset += len(view)

    def _release_views(self) -> None:
        for view in self._views:
            view.release()
        self._views.clear()

    def commit(self) -> None:
        """Publishes the block."""
        self._release_views()
        self._client._impl.commit(self._a)

    def abort(self) -> None:
        """Gives the room back; nothing is stored."""
        self._release_views()
        self._a.abort()


class ShmBuffer:
    """A buffer of the client's staging file, to keep and write blocks into (from a device copy,
    say): :meth:`ShmClient.put_many` of values that all lie inside such buffers (memoryviews or
    numpy arrays made from :attr:`view`) sends only their offsets, and kvtierd copies them into
    G2 itself; the client copies nothing (as Mooncake Store's registered buffers). A block is
    what the buffer held during ``put_many``; the buffer may be written again after it returns.
    Leaving the ``with`` block releases it (BufferError while an array made from it lives).
    """

    def __init__(self, buffer: Any) -> None:
        self._b = buffer
        self._views: list[memoryview] = []

    def __enter__(self) -> ShmBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def size(self) -> int:
        return int(self._b.size)

    @property
    def valid(self) -> bool:
        """False once released, or once kvtierd closed the connection that reserved it (a
        restart): its memory is still there, and ``put_many`` then copies values in it."""
        return bool(self._b.valid)

    @property
    def view(self) -> memoryview:
        """The whole buffer as one writable memoryview."""
        view: memoryview = self._b.view()
        self._views.append(view)
        return view

    def release(self) -> None:
        """Gives the room back; its views must not be used afterwards."""
        for view in self._views:
            view.release()
        self._views.clear()
        self._b.release()


class ShmClient(_BlockClient):
    """kvtierd's shared-memory fast path, for processes on the same host: block bytes never
    go through a socket. ``url`` is the daemon's Unix socket (``unix://PATH``).

    Requests of one ShmClient are serialised; use one per thread for parallel transfers. The
    daemon's arena is mapped into this process (``populate`` faults it in at connect). When
    kvtierd restarts or is upgraded, the next call connects again, waiting for up to
    ``retry_timeout`` seconds, and is sent again (leases and allocations of the old connection
    end: see :class:`ShmLease`).
    """

    def __init__(
        self,
        url: str = "unix://" + _DEFAULT_SOCKET,
        token: str | None = None,
        *,
        tenant: str | None = None,
        populate: bool = True,
        client_name: str = "kvtier-python-shm",
        retry_timeout: float = 10.0,
    ) -> None:
        endpoint, _ = parse_url(url)
        if not endpoint.startswith("unix:"):
            raise InvalidArgument(
                f"shared memory needs kvtierd's Unix socket (unix://PATH), not {url!r}"
            )
        self.url = url
        self._impl = _kvtier._ShmClient(
            os.fspath(endpoint[len("unix:") :]),
            tenant or "",
            token or "",
            client_name,
            populate,
            int(retry_timeout * 1000),
        )

    @property
    def arena_size(self) -> int:
        return int(self._impl.arena_size)

    @property
    def max_leases(self) -> int:
        """Most blocks this client may hold leased at once."""
        return int(self._impl.max_leases)

    @property
    def tenant(self) -> str:
        return str(self._impl.tenant)

    def get(self, keys: Sequence[Key]) -> ShmLease:
        """Leases the blocks of ``keys`` (at most :attr:`max_leases`) as read-only views."""
        return ShmLease(self._impl.get(keys))

    def allocate(
        self,
        key: Key,
        size: int,
        *,
        parent: Key | None = None,
        session: int = 0,
        dtype: Dtype | None = None,
    ) -> ShmAllocation | None:
        """Room for the block ``key`` of ``size`` bytes, to fill in place; None when the key is
        already stored (nothing to write)."""
        a = self._impl.allocate(key, size, parent, session, _dtype_code(dtype))
        return None if a is None else ShmAllocation(self, a)

    def staging_buffer(self, size: int) -> ShmBuffer:
        """A buffer of ``size`` bytes in this client's staging file (1 GiB, shared with
        :meth:`allocate`), for ``put_many`` without a copy: see :class:`ShmBuffer`."""
        return ShmBuffer(self._impl.staging_buffer(size))

    def flush(self) -> None:
        """Waits until kvtierd has applied every release and abort sent so far."""
        self._impl.flush()
