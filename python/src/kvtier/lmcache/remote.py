"""LMCache in-process mode on kvtier: a ``remote_storage_plugins`` connector for ``kvtier://``
URLs (tested with lmcache 0.5.6).

LMCache configuration (YAML, or the equivalent ``LMCACHE_*`` settings)::

    chunk_size: 256
    local_cpu: true
    max_local_cpu_size: 5
    remote_storage_plugins: ["kvtier"]
    extra_config:
      remote_storage_plugin.kvtier.module_path: kvtier.lmcache.remote
      remote_storage_plugin.kvtier.class_name: KvtierConnectorAdapter
      remote_storage_plugin.kvtier.url: "kvtier+unix:///run/kvtier/kvtierd.sock?token=SECRET"

URLs: ``kvtier://HOST:PORT`` (native protocol over TCP), ``kvtier+tls://HOST:PORT``,
``kvtier+unix:///PATH`` (the daemon's Unix socket), with optional query parameters ``token``,
``tenant`` and ``connections``. A chunk is stored as its bytes alone under the key of
``CacheEngineKey.to_string()`` (:func:`kvtier.named_key`); a chunk shorter than a full one is
a partial chunk (``save_unfull_chunk``), reshaped by its size.

Session hints (``docs/store.md``): LMCache 0.5.6 keeps every ``lmcache.*`` entry of a request's
``kv_transfer_params`` on its chunks' keys, so ``{"lmcache.kvtier.session": "conv-42",
"lmcache.kvtier.retain_s": 30, "lmcache.kvtier.priority": "high", "lmcache.kvtier.finished":
false}`` puts the request's chunks with that session and sends the hint after each batch of
them. LMCache gives a connector no request-finished callback: a retention counts from the
request's last stored chunk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lmcache.v1.storage_backend.connector import ConnectorAdapter, ConnectorContext
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from .. import _kvtier
from .._client import Client
from .._errors import Error, InvalidArgument
from .._hints import SessionHint, from_lmcache, log

_SCHEMES = {"kvtier": "tcp", "kvtier+tcp": "tcp", "kvtier+tls": "tls", "kvtier+unix": "unix"}


def client_for(url: str) -> Client:
    """A :class:`kvtier.Client` for a ``kvtier://`` URL (see the module docstring)."""
    parts = urlsplit(url)
    scheme = _SCHEMES.get(parts.scheme)
    if scheme is None:
        raise InvalidArgument(
            f"unknown URL {url!r}: use kvtier://HOST:PORT, kvtier+tls://HOST:PORT or "
            "kvtier+unix:///PATH"
        )
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - {"token", "tenant", "connections"}
    if unknown:
        raise InvalidArgument(f"unknown parameter(s) {sorted(unknown)} in {url!r}")
    target = parts.path if scheme == "unix" else parts.netloc
    if not target:
        raise InvalidArgument(
            f"{url!r} names no {'socket path' if scheme == 'unix' else 'host:port'}"
        )
    return Client(
        f"{scheme}://{target}",
        query.get("token"),
        tenant=query.get("tenant"),
        connections=int(query.get("connections", "4")),
        client_name="kvtier-lmcache",
    )


class KvtierRemoteConnector(RemoteConnector):  # type: ignore[misc]
    """LMCache's RemoteConnector over kvtierd. Chunks are read straight into the MemoryObjs
    LMCache allocates and written straight from them; the blocking calls run on a small thread
    pool (they release the GIL), never on LMCache's event loop."""

    def __init__(self, url: str, context: ConnectorContext) -> None:
        super().__init__(context.config, context.metadata)
        self.local_cpu_backend = context.local_cpu_backend
        self.client = client_for(url)
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="kvtier-lmcache")

    @staticmethod
    def _key(key: Any) -> bytes:
        name: bytes = _kvtier.named_key(key.to_string())
        return name

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _allocate(self) -> Any:
        return self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt)

    def _read(self, keys: list[Any]) -> list[Any]:
        objs = [self._allocate() for _ in keys]
        wanted = [i for i, o in enumerate(objs) if o is not None]
        sizes: list[int | None] = [None] * len(keys)
        if wanted:
            try:
                got = self.client.get_into(
                    [self._key(keys[i]) for i in wanted],
                    [objs[i].byte_array for i in wanted],
                )
            except Exception:
                for o in objs:
                    if o is not None:
                        o.ref_count_down()
                raise
            for i, size in zip(wanted, got, strict=True):
                sizes[i] = size
        out: list[Any] = []
        for obj, size in zip(objs, sizes, strict=True):
            if obj is None:
                out.append(None)
            elif size is None:
                obj.ref_count_down()
                out.append(None)
            else:
                out.append(self.reshape_partial_chunk(obj, size))
        return out

    def _write(self, keys: list[Any], objs: list[Any]) -> None:
        # The chunks of one batch may come from several requests: each group of the same hint
        # is put with its session, then hinted.
        groups: dict[SessionHint | None, list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(from_lmcache(getattr(k, "request_configs", None)), []).append(i)
        for hint, idx in groups.items():
            self.client.put_many(
                [self._key(keys[i]) for i in idx], [objs[i].byte_array for i in idx],
                session=hint.session if hint is not None else 0,
            )  # fmt: skip
            if hint is not None and hint.says_something:
                try:
                    self.client.hint_session(
                        hint.session, retain_s=hint.retain_s, finished=hint.finished,
                        priority=hint.priority,
                    )  # fmt: skip
                except Error as e:  # Advisory: NotFound once its blocks left DRAM.
                    log.debug("kvtier: session hint %s: %s", hint, e)

    def _prefix(self, keys: list[Any]) -> int:
        return self.client.lookup_prefix([self._key(k) for k in keys]).num_blocks

    async def exists(self, key: Any) -> bool:
        return bool(await self._run(self.exists_sync, key))

    def exists_sync(self, key: Any) -> bool:
        return self.client.exists(self._key(key))

    async def get(self, key: Any) -> Any:
        return (await self._run(self._read, [key]))[0]

    async def put(self, key: Any, memory_obj: Any) -> None:
        await self._run(self._write, [key], [memory_obj])

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: list[Any]) -> list[Any]:
        result: list[Any] = await self._run(self._read, list(keys))
        return result

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: list[Any], memory_objs: list[Any]) -> None:
        await self._run(self._write, list(keys), list(memory_objs))

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: list[Any]) -> int:
        return self._prefix(list(keys))

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(
        self, lookup_id: str, keys: list[Any], pin: bool = False
    ) -> int:
        result: int = await self._run(self._prefix, list(keys))
        return result

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str, keys: list[Any]) -> list[Any]:
        """The chunks found before the first miss (LMCache owns them); the rest are freed."""
        objs = await self.batched_get(keys)
        n = next((i for i, obj in enumerate(objs) if obj is None), len(objs))
        for obj in objs[n:]:
            if obj is not None:
                obj.ref_count_down()
        return objs[:n]

    def remove_sync(self, key: Any) -> bool:
        return self.client.delete(self._key(key))

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        try:
            await self._run(self.client.ping)
        except Exception:
            return 1
        return 0

    async def list(self) -> list[str]:
        """kvtierd does not list a tenant's keys: always empty."""
        return []

    async def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()


class KvtierConnectorAdapter(ConnectorAdapter):  # type: ignore[misc]
    """Creates :class:`KvtierRemoteConnector` for ``kvtier://`` URLs and for the plugin
    ``remote_storage_plugins: ["kvtier"]`` (URL from ``remote_storage_plugin.kvtier.url``)."""

    def __init__(self) -> None:
        super().__init__("kvtier://")

    def can_parse(self, url: str) -> bool:
        return url.split("://", 1)[0] in _SCHEMES or url.startswith("plugin://kvtier")

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        url = context.url
        if url.startswith("plugin://"):
            name = url[len("plugin://") :]
            extra = (context.config.extra_config if context.config is not None else None) or {}
            url = extra.get(f"remote_storage_plugin.{name}.url", "")
            if not url:
                raise InvalidArgument(
                    f"set extra_config remote_storage_plugin.{name}.url to kvtierd's kvtier:// URL"
                )
        return KvtierRemoteConnector(url, context)


__all__ = ["KvtierConnectorAdapter", "KvtierRemoteConnector", "client_for"]
