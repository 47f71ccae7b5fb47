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

Hybrid models (HiCache's v2 interface; ``docs/state.md``): every pool SGLang registers beside
the KV (``mamba``, ``swa``, ``indexer``, the DeepSeek V4 pools, draft pools) is stored as kvtier
state values of the page's first KV block, one state group per component of the pool's page
(``<pool>/<i>``, in ``get_page_buffer_meta`` order: a Mamba page's temporal state, then each
conv state), moved straight between the pool's host pages and kvtierd. ``batch_exists_v2`` is
one resume lookup in kvtierd with each pool's hit policy as its window (``trailing_pages``: the
transfer's trailing window; ``all_pages``: every page), and returns the longest page count the
engine can resume from and every such count (``restorable_prefix_pages``), never one whose
state is missing. A Mamba state that is TP-sharded under an MLA model (every rank writes its
own) is stored per rank. ``block_groups`` (which nothing in SGLang 0.5.23 produces) is answered
as its own verdict: the pages its leading complete groups cover, not gating the KV hit.
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
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
)
from sglang.srt.observability.metrics_collector import StorageMetrics

from . import _kvtier
from ._client import Client, _dtype_code
from ._errors import Error
from ._types import Role, StateGroup

_Buffer = Any  # A ctypes array over host-pool memory.
# Pools whose pages a resume needs only at the end of the prefix: with them the KV needs state.
_TRAILING_POOLS = {"mamba", "swa", "auxiliary_swa", "draft_swa"}


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
        # The pools beside the KV (v2): name -> (host pool, components per page).
        self._pools: dict[str, tuple[Any, int]] = {}
        # Whether the KV needs a state to resume from (a trailing-window pool is registered).
        self._kv_role = Role.KV

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

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Records a pool beside the KV and how many components one of its pages has."""
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        name = str(PoolName(host_pool_name).value)
        if name == PoolName.KV.value:
            return  # The anchor's pages go through the v1 calls.
        page = host_pool.page_size or 1
        ptrs, _ = host_pool.get_page_buffer_meta(torch.arange(page))
        self._pools[name] = (host_pool, len(ptrs))
        if name in _TRAILING_POOLS or name.endswith("_state"):
            self._kv_role = Role.KV_NEEDS_STATE

    def _groups(self, transfer: PoolTransfer, window: int) -> list[StateGroup]:
        """The kvtier state groups of a pool's page components, with one window."""
        _, components = self._pools[str(PoolName(transfer.name).value)]
        return [StateGroup(self._group(transfer.name, i), window) for i in range(components)]

    def _group(self, pool: Any, component: int) -> str:
        name = str(PoolName(pool).value)
        c = self._config
        if c.is_mla_model and c.tp_size > 1 and name == "mamba":
            # TP-sharded state under one KV namespace for every rank (MLA): each rank its own.
            return f"{name}/{component}@tp{c.tp_rank}"
        return f"{name}/{component}"

    def _anchor(self, page_hash: str) -> bytes:
        """The first KV block of a page, which its state values hang off."""
        assert self._namespace is not None, "register_mem_pool_host first"
        h = page_hash if self._regions == 1 else f"{page_hash}/0"
        return _kvtier.opaque_key(self._namespace, h)

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
                kv_keys, buffers, parents, 0, self._dtype, None, [int(self._kv_role)] * len(kv_keys)
            )
        except Error:
            return [False] * len(keys)
        pages = self._per_page([not isinstance(r, Error) for r in results])
        self._record(self._stats.backup_pgs, self._stats.backup_bandwidth, pages, buffers, start)
        return pages

    # -- the v2 interface: the pools of hybrid models, beside the KV ------------------------------

    def batch_exists_v2(
        self,
        keys: list[str],
        pool_transfers: list[PoolTransfer] | None = None,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> PoolTransferResult:
        """One resume lookup in kvtierd: the longest page count whose KV and every pool's pages
        (their hit policies) are stored, every such count, and each pool's own verdict."""
        if not keys:
            return PoolTransferResult(0, {}, [])
        gating: list[tuple[PoolTransfer, list[StateGroup]]] = []
        verdicts: list[tuple[PoolTransfer, list[StateGroup]]] = []
        try:
            for t in pool_transfers or []:
                if t.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                    gating.append((t, self._groups(t, max(1, len(t.keys or ())))))
                elif t.hit_policy == PoolHitPolicy.ALL_PAGES:
                    gating.append((t, self._groups(t, 0)))
                else:
                    verdicts.append((t, self._groups(t, 0)))
            groups = [g for _, gs in gating for g in gs]
            kv = self._keys(keys)
            m = self._client.lookup_resume(
                kv, groups, keys_per_block=self._regions, all_lengths=True
            )
            hits: dict[Any, int] = {PoolName.KV: m.kv_blocks} if m.kv_blocks else {}
            at = 0
            for t, gs in gating:
                pages = min(m.group_blocks[at : at + len(gs)], default=m.kv_blocks)
                at += len(gs)
                if pages:
                    hits[t.name] = pages
            for t, gs in verdicts:
                # A pool of key groups (block_groups): its leading complete groups, its own
                # verdict only.
                own = self._client.lookup_resume(kv, gs, keys_per_block=self._regions)
                group = max(1, t.group_pages)
                pages = min(own.group_blocks, default=own.kv_blocks) // group * group
                if pages:
                    hits[t.name] = pages
        except (Error, KeyError, ValueError):
            return PoolTransferResult(0, {}, [])
        return PoolTransferResult(m.resume_blocks, hits, list(m.resumable))

    def batch_set_v2(
        self, transfers: list[PoolTransfer], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[Any, list[bool]]:
        """Stores each pool's pages as state values of their pages' KV blocks: True for a page
        all of whose components were stored. SGLang writes these before the KV pages: a state
        without its KV is never a resume point."""
        return {t.name: self._pool_io(t, store=True) for t in transfers}

    def batch_get_v2(
        self, transfers: list[PoolTransfer], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[Any, list[bool]]:
        """Reads each pool's pages into its host pages: True for a page all of whose components
        came back with exactly their sizes."""
        return {t.name: self._pool_io(t, store=False) for t in transfers}

    def _pool_io(self, t: PoolTransfer, store: bool) -> list[bool]:
        keys = list(t.keys or [])
        if not keys:
            return []
        name = str(PoolName(t.name).value)
        if name == PoolName.KV.value:
            assert t.host_indices is not None
            return (self.batch_set_v1 if store else self.batch_get_v1)(keys, t.host_indices)
        entry = self._pools.get(name)
        if entry is None or t.host_indices is None:
            return [False] * len(keys)
        pool, components = entry
        if len(keys) * (pool.page_size or 1) != t.host_indices.numel():
            return [False] * len(keys)
        ptrs, sizes = pool.get_page_buffer_meta(t.host_indices)
        if len(ptrs) != len(keys) * components:
            return [False] * len(keys)
        buffers = [(ctypes.c_ubyte * s).from_address(p) for p, s in zip(ptrs, sizes, strict=True)]
        anchors = [self._anchor(k) for k in keys]
        state_keys = [
            _kvtier.state_key(a, self._group(t.name, c)) for a in anchors for c in range(components)
        ]
        try:
            if store:
                if not (self._writer or name == "mamba"):
                    return [True] * len(keys)  # Another rank stores these (MLA).
                parents = [a for a in anchors for _ in range(components)]
                results: list[Any] = self._client._impl.put_many(
                    state_keys, buffers, parents, 0, 0, None, [int(Role.STATE)] * len(state_keys)
                )
                ok = [not isinstance(r, Error) for r in results]
            else:
                results = self._client._impl.get_into(state_keys, buffers)
                ok = [
                    isinstance(r, int) and r == len(b)
                    for r, b in zip(results, buffers, strict=True)
                ]
        except Error:
            return [False] * len(keys)
        return [all(ok[i : i + components]) for i in range(0, len(ok), components)]

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
