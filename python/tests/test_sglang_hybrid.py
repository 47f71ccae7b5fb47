"""kvtier.sglang's v2 interface (hybrid models) against the real sglang package (0.5.23) and a
real kvtierd.

The host pools are SGLang's own, built on this CPU by its hybrid pool assembler
(hybrid_pool_assembler.py: build_kv_host_pool, build_mamba_host_pool, build_hybrid_swa_group,
build_host_pool_group) over its device pools allocated with device="cpu": a Mamba hybrid
(HybridLinearKVPool + MambaPool: pools kv, mamba), a sliding-window model (SWAKVPool: kv, swa)
and a DeepSeek V3.2-style sparse-attention model (DSATokenToKVPool: kv (MLA), indexer). The
backend is created by SGLang's StorageBackendFactory and driven by the real
HybridCacheController's storage methods (_page_backup, _storage_hit_query,
_sync_prefetch_hit_query, _page_transfer), the way its backup and prefetch threads call them;
the controller's threads, collectives and device allocator need a GPU, so the test builds it
with only what those methods read.
"""

from __future__ import annotations

from collections.abc import Iterator
from queue import Empty, Queue
from typing import Any

import pytest
import torch
from conftest import Daemon
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorageConfig,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
)
from sglang.srt.mem_cache.hybrid_cache.host_pool_config import prepare_host_pool_config
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import (
    HybridCacheController,
    PrefetchOperation,
    StorageOperation,
)
from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import (
    _build_pool_entries,
    _stage_local_layer_mapping,
    _swa_layer_mappings,
    build_host_pool_group,
    build_hybrid_swa_group,
    build_kv_host_pool,
    build_mamba_host_pool,
    build_pool_entry,
)
from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, HybridLinearKVPool, MambaPool
from sglang.srt.mem_cache.pool_host import HostPoolGroup
from sglang.srt.mem_cache.pool_host import common as host_common
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.utils import get_storage_hash_str
from sglang.srt.runtime_context import get_context

import kvtier
from kvtier.sglang import KvtierHiCacheStorage

PAGE = 16
DSA_PAGE = 64  # DSATokenToKVPool's pages are 64 tokens.


@pytest.fixture(scope="module", autouse=True)
def cpu_server_args() -> Iterator[None]:
    """What the assembler reads from the server's arguments, for a CPU host pool; and host
    memory without cudaHostRegister (the pools pin by default, which needs a GPU driver)."""
    override = get_context().override_server_args(
        device="cpu", hicache_ratio=2.0, hicache_size=0, hicache_mem_layout="page_first",
        hicache_io_backend="kernel", hicache_storage_backend=None,
    )  # fmt: skip
    override.install()
    alloc = host_common.ALLOC_MEMORY_FUNCS["cpu"]
    host_common.ALLOC_MEMORY_FUNCS["cpu"] = (
        lambda dims, dtype, device, pin_memory, allocator, registration_granularity_bytes=None: (
            allocator.allocate(dims, dtype=dtype, device=device)
        )
    )
    yield
    host_common.ALLOC_MEMORY_FUNCS["cpu"] = alloc
    override.restore()


def mamba_hybrid() -> tuple[HostPoolGroup, list[Any]]:
    """Three Mamba2 layers and one full-attention layer, as build_hybrid_mamba_stack makes
    their host pools."""
    shape = Mamba2StateShape.create(
        tp_world_size=1, intermediate_size=64, n_groups=1, num_heads=4, head_dim=16, state_size=8,
        conv_kernel=4,
    )  # fmt: skip
    mamba = MambaPool(
        size=8, spec_state_size=8, cache_params=Mamba2CacheParams(shape=shape, layers=[0, 1, 2]),
        mamba_layer_ids=[0, 1, 2], device="cpu",
    )  # fmt: skip
    kvcache = HybridLinearKVPool(
        size=128, dtype=torch.bfloat16, page_size=PAGE, head_num=2, head_dim=16,
        full_attention_layer_ids=[3], device="cpu", mamba_pool=mamba, enable_memory_saver=False,
    )  # fmt: skip
    (info,) = mamba.get_device_pool_infos()
    full = _stage_local_layer_mapping(kvcache.full_attention_layer_id_mapping, kvcache.start_layer)
    config = prepare_host_pool_config(
        decls=kvcache.host_pool_decls(), full_layer_mapping=full, transfer_layer_id_max=4,
        transfer_page_size=PAGE,
    )  # fmt: skip
    kv_host = build_kv_host_pool(
        kv_pool=config.pools[0].decl.device_pool, page_size=PAGE, use_mla=False, host_size=None
    )
    mamba_host = build_mamba_host_pool(mamba, info, host_size=0, layout="page_first")
    mamba_entry = build_pool_entry(
        name=PoolName.MAMBA, host_pool=mamba_host, device_pool=mamba,
        layer_mapping={0: 0, 1: 1, 2: 2}, transfer_layer_id_max=4,
    )  # fmt: skip
    entries = [*_build_pool_entries(config=config, root_host_pool=kv_host), mamba_entry]
    return HostPoolGroup(entries), []


def swa_hybrid() -> tuple[HostPoolGroup, list[Any]]:
    """Two sliding-window and two full-attention layers (build_hybrid_swa_group)."""
    kvcache = SWAKVPool(
        size=128, size_swa=64, page_size=PAGE, dtype=torch.bfloat16, head_num=2, head_dim=16,
        swa_attention_layer_ids=[0, 2], full_attention_layer_ids=[1, 3], device="cpu",
        enable_memory_saver=False, enable_alt_stream=False,
    )  # fmt: skip
    full, swa = _swa_layer_mappings(kvcache)
    group = build_hybrid_swa_group(
        page_size=PAGE, full_kv_pool=kvcache.full_kv_pool, swa_kv_pool=kvcache.swa_kv_pool,
        full_layer_mapping=full, swa_layer_mapping=swa, use_mla=False,
    )  # fmt: skip
    return group, []


def dsa() -> tuple[HostPoolGroup, list[Any]]:
    """MLA latent KV with DeepSeek V3.2's indexer keys (build_host_pool_group); the indexer is
    a sidecar of the KV's pages."""
    kvcache = DSATokenToKVPool(
        size=128, page_size=DSA_PAGE, kv_lora_rank=32, dtype=torch.bfloat16, qk_rope_head_dim=16,
        layer_num=2, device="cpu", index_head_dim=128, enable_memory_saver=False, kv_cache_dim=48,
    )  # fmt: skip
    config = prepare_host_pool_config(
        decls=kvcache.host_pool_decls(), full_layer_mapping={0: 0, 1: 1}, transfer_layer_id_max=2,
        transfer_page_size=DSA_PAGE,
    )  # fmt: skip
    sidecars = [c.decl.sidecar_spec() for c in config.pools if not c.decl.is_primary]
    return build_host_pool_group(config=config), sidecars


MODELS = {"mamba": (mamba_hybrid, PoolName.MAMBA, 1), "swa": (swa_hybrid, PoolName.SWA, 2),
          "dsa": (dsa, None, 0)}  # fmt: skip


def backend(url: str, group: HostPoolGroup, mla: bool) -> KvtierHiCacheStorage:
    anchor = group.anchor_entry.host_pool
    config = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=mla, enable_storage_metrics=False,
        is_page_first_layout=anchor.layout == "page_first", model_name="hybrid-test",
        extra_config={"backend_name": "kvtier", "module_path": "kvtier.sglang",
                      "class_name": "KvtierHiCacheStorage", "interface_v1": 1, "url": url,
                      "timeout": 0.5},
    )  # fmt: skip
    be = StorageBackendFactory.create_backend("dynamic", config, anchor)
    assert isinstance(be, KvtierHiCacheStorage)
    return be


class Controller:
    """SGLang's HybridCacheController with only what its storage methods read, attached to the
    backend as attach_storage_backend does (the anchor host pool, then every pool entry by v2)."""

    def __init__(self, group: HostPoolGroup, be: KvtierHiCacheStorage) -> None:
        for entry in group.entries:
            entry.host_pool.pin_memory = False
        cc = HybridCacheController.__new__(HybridCacheController)
        cc.mem_pool_host = group
        cc.storage_host_pool = group.anchor_entry.host_pool
        cc.page_size = group.page_size
        cc.storage_backend = be
        cc.storage_backend_type = "dynamic"
        cc.storage_config = be._config
        cc.enable_storage = True
        cc.prefetch_hits_sync_groups = []
        cc.prefetch_completion_sync_groups = []
        cc.prefetch_sync_queue = Queue()
        cc.host_mem_release_queue = Queue()
        cc._init_extra_host_mem_release_queues()
        cc.page_get_func = cc._page_get_zero_copy
        cc.page_set_func = cc._page_set_zero_copy
        be.register_mem_pool_host(cc.storage_host_pool)
        for entry in group.entries:
            be.register_mem_host_pool_v2(entry.host_pool, entry.name)
        be.on_host_pools_registered()
        self.cc, self.group, self.be = cc, group, be

    def pool(self, name: Any) -> Any:
        return self.group.get_pool(name)

    def backup(
        self, tokens: list[int], sidecar: Any, window: int, sidecars: list[Any],
        prefix_keys: list[str] | None = None, seed: int = 1,
    ) -> tuple[list[str], dict[Any, list[bytes]]]:  # fmt: skip
        """Writes a node of `tokens` (after `prefix_keys`) as the backup thread does: the side
        pool's trailing pages first, then the KV. Returns its page hashes and what it wrote."""
        page = self.group.page_size
        last = prefix_keys[-1] if prefix_keys else None
        hashes = get_storage_hash_str(tokens, last, page_size=page)
        kv = self.group.alloc(len(hashes) * page)
        fill(self.group.anchor_entry.host_pool, kv, seed)
        written = {PoolName.KV: pages(self.group.anchor_entry.host_pool, kv)}
        transfers = []
        if sidecar is not None:
            pool = self.pool(sidecar)
            # Mamba: one state slot, the last page's key; SWA: the window's pages.
            keys = hashes[-window:]
            hi = pool.alloc(len(keys) * pool.page_size)
            fill(pool, hi, seed + 1)
            written[sidecar] = pages(pool, hi)
            transfers.append(PoolTransfer(name=sidecar, host_indices=hi, keys=keys,
                                          hit_policy=PoolHitPolicy.TRAILING_PAGES))  # fmt: skip
        for spec in sidecars:  # KV-derived (the indexer): the KV's pages and keys.
            fill(self.pool(spec.pool_name), kv, seed + 2)
            written[spec.pool_name] = pages(self.pool(spec.pool_name), kv)
            transfers.append(PoolTransfer(name=spec.pool_name, keys=list(hashes),
                                          hit_policy=spec.hit_policy,
                                          indices_from_pool=spec.indices_from_pool))  # fmt: skip
        op = StorageOperation(kv, tokens, hash_value=list(hashes), prefix_keys=prefix_keys,
                              pool_transfers=transfers or None)  # fmt: skip
        self.cc._page_backup(op)
        assert op.completed_tokens == len(tokens)
        return hashes, written

    def query(
        self, tokens: list[int], sidecar: Any, window: int, sidecars: list[Any]
    ) -> tuple[PrefetchOperation, int]:
        """The prefetch thread's hit query: placeholders for trailing pools (only their count
        matters), the whole span for KV-derived ones. Returns the operation and hit tokens."""
        pre = []
        if sidecar is not None:
            pre.append(PoolTransfer(name=sidecar, keys=["__placeholder__"] * window,
                                    hit_policy=PoolHitPolicy.TRAILING_PAGES))  # fmt: skip
        for spec in sidecars:
            pre.append(PoolTransfer(name=spec.pool_name, keys=None, hit_policy=spec.hit_policy,
                                    indices_from_pool=spec.indices_from_pool))  # fmt: skip
        op = PrefetchOperation(CacheRequestHandle(rid="r", attempt_id=0), tokens, None,
                               prefix_keys=None, pool_transfers=pre or None)  # fmt: skip
        hashes, hit = self.cc._storage_hit_query(op)
        hit = self.cc._sync_prefetch_hit_query(op, hit)
        op.hash_value = hashes[: hit // self.group.page_size]
        op.storage_hit_count = hit
        return op, hit

    def load(self, op: PrefetchOperation) -> dict[Any, list[bytes]]:
        """Allocates the host pages as the scheduler does, runs the IO thread's transfer, and
        returns what landed in each pool."""
        page = self.group.page_size
        op.host_indices = self.group.alloc(op.storage_hit_count)
        for t in op.pool_transfers or []:
            if t.indices_from_pool is None:
                pool = self.pool(t.name)
                n = min(len(t.keys), op.storage_hit_count // page)
                t.host_indices = pool.alloc(n * pool.page_size)
        self.cc._page_transfer(op)
        while True:
            try:
                self.cc.prefetch_sync_queue.get_nowait()
            except Empty:
                break
        out = {PoolName.KV: pages(self.group.anchor_entry.host_pool, op.host_indices)}
        for t in op.pool_transfers or []:
            hi = op.host_indices if t.indices_from_pool is not None else t.host_indices
            out[t.name] = pages(self.pool(t.name), hi)
        return out


def views(pool: Any, indices: torch.Tensor) -> list[list[torch.Tensor]]:
    """[page][component] uint8 views of a host pool's pages (get_page_buffer_meta's order)."""
    ptrs, sizes = pool.get_page_buffer_meta(indices)
    n = len(indices) // pool.page_size
    buffers = [getattr(pool, "kv_buffer", None), getattr(pool, "temporal_buffer", None),
               getattr(pool, "index_k_with_scale_buffer", None),
               *(getattr(pool, "conv_buffer", None) or [])]  # fmt: skip
    out = []
    for p, s in zip(ptrs, sizes, strict=True):
        for t in buffers:
            if isinstance(t, torch.Tensor) and t.numel():
                base = t.data_ptr()
                if base <= p and p + s <= base + t.numel() * t.element_size():
                    out.append(t.view(-1).view(torch.uint8)[p - base : p - base + s])
                    break
        else:
            raise AssertionError("a page pointer outside the pool's buffers")
    k = len(out) // n
    return [out[i * k : (i + 1) * k] for i in range(n)]


def fill(pool: Any, indices: torch.Tensor, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for page in views(pool, indices):
        for v in page:
            v.copy_(torch.randint(0, 256, (v.numel(),), generator=g, dtype=torch.uint8))


def pages(pool: Any, indices: torch.Tensor) -> list[bytes]:
    return [b"".join(bytes(v.numpy()) for v in page) for page in views(pool, indices)]


def tokens_of(n_pages: int, page: int, seed: int = 7) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 50000, (n_pages * page,), generator=g).tolist()


@pytest.mark.parametrize("kind", list(MODELS))
def test_a_hybrid_models_pools_round_trip_byte_exact_through_sglangs_controller(
    daemon: Daemon, kind: str
) -> None:
    build, sidecar, window = MODELS[kind]
    group, sidecars = build()
    c = Controller(group, backend(daemon.unix_url, group, mla=kind == "dsa"))
    page = group.page_size
    n = 3 if sidecar else 2  # The DSA pool's pages are 64 tokens: fewer fit.
    hashes, written = c.backup(tokens_of(n, page), sidecar, window, sidecars)
    # One page more than stored is asked for: the hit is the pages stored.
    op, hit = c.query(tokens_of(n + 1, page), sidecar, window, sidecars)
    assert hit == n * page
    assert op.pool_storage_result.restorable_prefix_pages == ([n] if sidecar else [1, 2])
    got = c.load(op)
    for name, want in written.items():
        assert got[name] == want, f"{kind}: {name} came back with other bytes"
    # In kvtierd: the pool's pages are state values of their page's first KV block.
    with kvtier.Client(daemon.unix_url) as client:
        names = [f"{(sidecar or PoolName.INDEXER).value}/{i}" for i in range(2 if sidecar else 1)]
        m = client.lookup_resume(
            c.be._keys(hashes), [kvtier.StateGroup(n, window) for n in names],
            keys_per_block=c.be._regions, all_lengths=True,
        )  # fmt: skip
        assert m.resumable == ([n] if sidecar else [1, 2])


def test_a_mamba_state_resumes_only_at_the_boundaries_it_was_stored_at(daemon: Daemon) -> None:
    group, _ = mamba_hybrid()
    c = Controller(group, backend(daemon.unix_url, group, mla=False))
    tokens = tokens_of(4, PAGE)
    # A request of two pages, then its continuation to four: a state after page 2 and page 4.
    first, _ = c.backup(tokens[: 2 * PAGE], PoolName.MAMBA, 1, [])
    second, written = c.backup(tokens[2 * PAGE :], PoolName.MAMBA, 1, [], prefix_keys=first, seed=9)
    op, hit = c.query(tokens, PoolName.MAMBA, 1, [])
    assert op.pool_storage_result.restorable_prefix_pages == [2, 4]
    assert hit == 4 * PAGE
    assert c.load(op)[PoolName.MAMBA] == written[PoolName.MAMBA]
    # The state after page 4 is lost (evicted, deleted): pages 3 and 4 have KV but no state,
    # so the resume is after page 2, never after 3 or 4.
    with kvtier.Client(daemon.unix_url) as client:
        anchor = c.be._anchor(second[-1])
        assert client.delete(kvtier.state_key(anchor, "mamba/0"))
    op, hit = c.query(tokens, PoolName.MAMBA, 1, [])
    assert op.pool_storage_result.restorable_prefix_pages == [2]
    assert hit == 2 * PAGE


def test_a_swa_page_lost_or_of_the_wrong_size_shortens_the_resume(daemon: Daemon) -> None:
    group, _ = swa_hybrid()
    c = Controller(group, backend(daemon.unix_url, group, mla=False))
    tokens = tokens_of(3, PAGE)
    hashes, _ = c.backup(tokens, PoolName.SWA, 2, [])
    with kvtier.Client(daemon.unix_url) as client:
        # The V of the window's first page (page 2) is replaced by a value of another size.
        key = kvtier.state_key(c.be._anchor(hashes[1]), "swa/1")
        assert client.delete(key)
        client.put(key, b"x" * 100, parent=c.be._anchor(hashes[1]), dtype=None)
    # kvtierd still finds every value present, so the query reaches page 3...
    op, hit = c.query(tokens, PoolName.SWA, 2, [])
    assert hit == 3 * PAGE
    # ...and the read refuses the page whose size is wrong: SGLang loads the pages before it.
    swa = c.pool(PoolName.SWA)
    hi = swa.alloc(2 * PAGE)
    result = c.be.batch_get_v2(
        [PoolTransfer(name=PoolName.SWA, host_indices=hi, keys=hashes[1:],
                      hit_policy=PoolHitPolicy.TRAILING_PAGES)]
    )  # fmt: skip
    assert result[PoolName.SWA] == [False, True]
    # A page missing altogether: every resume point's window needs it or a page never stored
    # (the window's pages were written for the node's end only), so there is none.
    with kvtier.Client(daemon.unix_url) as client:
        assert client.delete(key)
    op, hit = c.query(tokens, PoolName.SWA, 2, [])
    assert op.pool_storage_result.restorable_prefix_pages == []
    assert hit == 0


def test_another_model_or_tenant_never_matches_a_pool_page(daemon: Daemon) -> None:
    group, _ = mamba_hybrid()
    c = Controller(group, backend(daemon.unix_url, group, mla=False))
    tokens = tokens_of(2, PAGE)
    c.backup(tokens, PoolName.MAMBA, 1, [])
    other_group, _ = mamba_hybrid()
    be = backend(daemon.unix_url, other_group, mla=False)
    be._config.extra_config["token"] = "acme-token"
    other = Controller(other_group, StorageBackendFactory.create_backend(
        "dynamic", be._config, other_group.anchor_entry.host_pool))  # fmt: skip
    assert other.query(tokens, PoolName.MAMBA, 1, [])[1] == 0
