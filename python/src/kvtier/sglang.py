"""SGLang HiCache on kvtier: an L3 storage backend (tested with sglang 0.5.23).

Selected without patching SGLang::

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
      --hicache-mem-layout page_first --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.sglang", "class_name": "KvtierHiCacheStorage",
        "interface_v1": 1, "url": "unix:///var/lib/kvtier/kvtierd.sock", "token": "TOKEN"}'

Extra-config keys: ``url`` (required; ``unix://``, ``tcp://`` or ``tls://``), ``token``,
``tenant``, ``connections`` (default 4), ``timeout`` (seconds a call waits for a kvtierd that is
unreachable, stopped or hung, default 2; then the pages count as misses or failed writes and
SGLang recomputes them).

Each SGLang page becomes one kvtier block per memory region of the page in the host pool
(``get_page_buffer_meta``: K and V for MHA, one latent region for MLA), moved straight between
the host pool's pages and kvtierd (no intermediate tensor). The keys are SGLang's page hashes
(:func:`kvtier.opaque_key`) in a namespace of the model, the KV geometry and dtype, the tensor-,
pipeline- and context-parallel rank and size, and the tenant: another model, sharding or tenant
never matches. MLA pages are the same on every TP rank: rank 0 (SGLang's storage writer)
stores them, every rank reads them. A page's blocks are chained to the previous page's, so that
kvtierd evicts prompts tail first.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
)
from sglang.srt.observability.metrics_collector import StorageMetrics

from . import _kvtier
from ._client import Client, _dtype_code
from ._errors import Error

_Buffer = Any  # A ctypes array over host-pool memory.


class KvtierHiCacheStorage(HiCacheStorage):  # type: ignore[misc]
    """SGLang's ``HiCacheStorage`` over a kvtierd (see the module's documentation)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Any = None) -> None:
        extra = dict(storage_config.extra_config or {})
        if "url" not in extra:
            raise ValueError("kvtier HiCache backend: the extra config needs a 'url' of kvtierd")
        self._config = storage_config
        self._client = Client(
            extra["url"],
            extra.get("token"),
            tenant=extra.get("tenant"),
            connections=int(extra.get("connections", 4)),
            retry_timeout=float(extra.get("timeout", 2.0)),
            io_timeout=float(extra.get("timeout", 2.0)),
        )
        self._tenant = self._client.server_info.tenant
        self._v1 = bool(int(extra.get("interface_v1", 0)))
        self._writer = storage_config.is_storage_writer
        self._metrics = storage_config.enable_storage_metrics
        self._stats = StorageMetrics()
        self._namespace: _kvtier.Namespace | None = None
        self._regions = 0  # Memory regions, hence kvtier blocks, per page.
        self._dtype = 0
        self.mem_pool_host: Any = None

    # -- setup -----------------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        c = self._config
        host = mem_pool_host
        page = host.page_size
        ptrs, _ = host.get_page_buffer_meta(torch.arange(page))
        self._regions = len(ptrs)
        mla = c.is_mla_model
        # The model string carries what Namespace has no field for: pipeline stage (and its
        # layers), context-parallel and decode-context-parallel shard, and the pool layout,
        # which decides what a page's regions hold.
        layers = f"layers{host.start_layer}+{host.layer_num}"
        shard = [f"pp{c.pp_rank}of{c.pp_size}", layers]
        if c.attn_cp_size > 1:
            shard.append(f"cp{c.attn_cp_rank}of{c.attn_cp_size}")
        if c.dcp_size > 1:
            shard.append(f"dcp{c.dcp_rank}of{c.dcp_size}")
        model = "|".join([c.model_name or "", "sglang", host.layout, *shard])
        heads = 1 if mla else host.head_num
        dim = host.kv_cache_dim if mla else host.head_dim
        self._namespace = _kvtier.Namespace(
            self._tenant,
            model,
            num_layers=host.layer_num,
            num_kv_heads=heads,
            head_dim=dim,
            dtype=host.dtype,
            tokens_per_block=page,
            tp_rank=0 if mla else c.tp_rank,
            tp_size=1 if mla else c.tp_size,
        )
        self._dtype = _dtype_code(host.dtype)

    def _keys(self, page_hashes: list[str]) -> list[bytes]:
        assert self._namespace is not None, "register_mem_pool_host first"
        ns = self._namespace
        if self._regions == 1:
            return [_kvtier.opaque_key(ns, h) for h in page_hashes]
        return [
            _kvtier.opaque_key(ns, f"{h}/{r}") for h in page_hashes for r in range(self._regions)
        ]

    def _buffers(self, host_indices: torch.Tensor) -> list[_Buffer]:
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        return [(ctypes.c_ubyte * s).from_address(p) for p, s in zip(ptrs, sizes, strict=True)]

    # -- the v1 interface: straight between kvtierd and the host pool's pages ------------------

    def batch_exists(
        self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> int:
        """How many leading pages kvtierd holds (all regions of each; the whole-page objects
        of :meth:`set` when SGLang runs the original interface)."""
        if not keys:
            return 0
        v1 = self._v1
        try:
            found = self._client.lookup_prefix(
                self._keys(keys) if v1 else self._whole_keys(keys)
            ).num_blocks
        except Error:
            return 0
        return int(found // self._regions) if v1 else int(found)

    def batch_get_v1(
        self,
        keys: list[str],
        host_indices: torch.Tensor,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> list[bool]:
        """Reads each page into its host-pool pages; True only for a page all of whose regions
        came back with exactly their sizes."""
        if not keys:
            return []
        buffers = self._buffers(host_indices)
        start = time.perf_counter()
        try:
            results: list[Any] = self._client._impl.get_into(self._keys(keys), buffers)
        except Error:
            return [False] * len(keys)
        ok = [isinstance(r, int) and r == len(b) for r, b in zip(results, buffers, strict=True)]
        pages = self._per_page(ok)
        self._record(
            self._stats.prefetch_pgs, self._stats.prefetch_bandwidth, pages, buffers, start
        )
        return pages

    def batch_set_v1(
        self,
        keys: list[str],
        host_indices: torch.Tensor,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> list[bool]:
        """Stores each page from its host-pool pages, chained after ``extra_info.prefix_keys``.
        On a rank that is not SGLang's storage writer (MLA, rank > 0) nothing is stored."""
        if not keys:
            return []
        if not self._writer:
            return [True] * len(keys)
        buffers = self._buffers(host_indices)
        kv_keys = self._keys(keys)
        prefix = extra_info.prefix_keys if extra_info is not None else None
        parent = self._keys(prefix[-1:])[-1] if prefix else None
        parents: list[bytes | None] = [parent, *kv_keys[:-1]]
        start = time.perf_counter()
        try:
            results: list[Any] = self._client._impl.put_many(
                kv_keys, buffers, parents, 0, self._dtype
            )
        except Error:
            return [False] * len(keys)
        pages = self._per_page([not isinstance(r, Error) for r in results])
        self._record(self._stats.backup_pgs, self._stats.backup_bandwidth, pages, buffers, start)
        return pages

    def _per_page(self, region_ok: list[bool]) -> list[bool]:
        n = self._regions
        return [all(region_ok[i : i + n]) for i in range(0, len(region_ok), n)]

    def _record(
        self, pages: list[int], bandwidth: list[float], ok: list[bool], buffers: list[_Buffer],
        start: float,
    ) -> None:  # fmt: skip
        if self._metrics:
            seconds = max(time.perf_counter() - start, 1e-9)
            pages.append(sum(ok))
            bandwidth.append(sum(len(b) for b in buffers) / seconds / 1e9)

    # -- the original interface: whole pages as tensors ------------------------------------------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def get(
        self, key: str, target_location: Any = None, target_sizes: Any = None
    ) -> torch.Tensor | None:
        """Reads the page stored under ``key`` by :meth:`set` into ``target_location`` (a
        contiguous tensor of its size) and returns it, or None for a miss."""
        return self.batch_get([key], [target_location])[0]

    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[torch.Tensor | None]:
        if target_locations is None or len(target_locations) != len(keys):
            raise ValueError("kvtier HiCache backend: one target tensor per key is needed")
        views = [t.view(-1).view(torch.uint8) for t in target_locations]
        try:
            results: list[Any] = self._client._impl.get_into(self._whole_keys(keys), views)
        except Error:
            return [None] * len(keys)
        return [
            t if isinstance(r, int) and r == v.numel() else None
            for r, t, v in zip(results, target_locations, views, strict=True)
        ]

    def set(
        self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None
    ) -> bool:
        """Stores a page given as one contiguous tensor."""
        return self.batch_set([key], [value])

    def batch_set(
        self, keys: list[str], values: Any = None, target_locations: Any = None,
        target_sizes: Any = None,
    ) -> bool:  # fmt: skip
        if values is None or len(values) != len(keys):
            raise ValueError("kvtier HiCache backend: one value tensor per key is needed")
        if not self._writer:
            return True
        kv_keys = self._whole_keys(keys)
        try:
            self._client.put_many(
                kv_keys, [v.contiguous().view(-1).view(torch.uint8) for v in values], chain=True
            )
        except Error:
            return False
        return True

    def _whole_keys(self, page_hashes: list[str]) -> list[bytes]:
        # A whole page as one tensor holds other bytes than its regions: its own keys.
        assert self._namespace is not None, "register_mem_pool_host first"
        return [_kvtier.opaque_key(self._namespace, f"{h}/page") for h in page_hashes]

    # -- the rest --------------------------------------------------------------------------------

    def clear(self) -> None:
        """Deletes every block of the tenant (of this token), on every tier of kvtierd."""
        self._client.delete_all()

    def get_stats(self) -> StorageMetrics | None:
        """Pages moved per call and their GB/s since the last call (with
        ``enable_storage_metrics``)."""
        if not self._metrics:
            return None
        stats, self._stats = self._stats, StorageMetrics()
        return stats

    def close(self) -> None:
        self._client.close()


__all__ = ["KvtierHiCacheStorage"]
