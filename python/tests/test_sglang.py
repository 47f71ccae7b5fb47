"""kvtier.sglang against the real sglang package (0.5.23 from PyPI) and a real kvtierd.

The backend is created by SGLang's own StorageBackendFactory ("dynamic", with the extra config a
user passes to --hicache-storage-backend-extra-config) and moves pages of SGLang's own host-pool
classes (MHATokenToKVPoolHost, MLATokenToKVPoolHost), built on this CPU over SGLang's device
pools allocated with device="cpu".
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
import torch
from conftest import Daemon
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, HiCacheStorageExtraInfo
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

import kvtier
from kvtier.sglang import KvtierHiCacheStorage

PAGE = 16
LAYERS = 3


def mha_host(layout: str = "page_first", heads: int = 2) -> Any:
    dev = MHATokenToKVPool(
        size=256, page_size=PAGE, dtype=torch.bfloat16, head_num=heads, head_dim=64,
        layer_num=LAYERS, device="cpu", enable_memory_saver=False, enable_alt_stream=False,
    )  # fmt: skip
    info = dev.get_device_pool_infos()[0].buffer_info
    return MHATokenToKVPoolHost(
        info, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu",
        device_capacity_tokens=dev.size, start_layer=dev.start_layer, end_layer=dev.end_layer,
    )  # fmt: skip


def mla_host() -> Any:
    dev = MLATokenToKVPool(
        size=256, page_size=PAGE, dtype=torch.bfloat16, kv_lora_rank=64, qk_rope_head_dim=16,
        layer_num=LAYERS, device="cpu", enable_memory_saver=False,
    )  # fmt: skip
    info = dev.get_device_pool_infos()[0].buffer_info
    return MLATokenToKVPoolHost(
        info, 2.0, 0, PAGE, "page_first", pin_memory=False, device="cpu",
        override_kv_cache_dim=dev.kv_cache_dim, device_capacity_tokens=dev.size,
        start_layer=dev.start_layer, end_layer=dev.end_layer, target_layer_num=dev.layer_num,
    )  # fmt: skip


def backend(
    url: str, host: Any, *, token: str | None = None, model: str = "llama-3-8b", tp_rank: int = 0,
    tp_size: int = 1, pp_rank: int = 0, pp_size: int = 1, mla: bool = False, interface_v1: int = 1,
) -> KvtierHiCacheStorage:  # fmt: skip
    extra: dict[str, Any] = {
        "backend_name": "kvtier", "module_path": "kvtier.sglang",
        "class_name": "KvtierHiCacheStorage", "interface_v1": interface_v1, "url": url,
        "timeout": 0.5,
    }  # fmt: skip
    if token:
        extra["token"] = token
    config = HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size, attn_cp_rank=0,
        attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=True,
        is_page_first_layout=host.layout == "page_first", model_name=model, extra_config=extra,
    )  # fmt: skip
    be = StorageBackendFactory.create_backend("dynamic", config, host)
    be.register_mem_pool_host(host)  # As SGLang's cache controller does after creating it.
    assert isinstance(be, KvtierHiCacheStorage)
    return be


def page_hashes(n: int, salt: str = "") -> list[str]:
    """SGLang-style page hashes: SHA-256 hex, each over the previous one and the page."""
    out, prev = [], ""
    for i in range(n):
        prev = hashlib.sha256(f"{prev}{salt}{i}".encode()).hexdigest()
        out.append(prev)
    return out


def fill(host: Any, pages: int, seed: int) -> torch.Tensor:
    """Allocates pages in the host pool and writes random KV into every byte of them."""
    indices = host.alloc(pages * PAGE)
    g = torch.Generator().manual_seed(seed)
    ptrs, sizes = host.get_page_buffer_meta(indices)
    flat = host.kv_buffer.view(-1).view(torch.uint8)
    base = flat.data_ptr()
    for p, s in zip(ptrs, sizes, strict=True):
        flat[p - base : p - base + s] = torch.randint(0, 256, (s,), generator=g, dtype=torch.uint8)
    return indices


def page_bytes(host: Any, indices: torch.Tensor) -> list[bytes]:
    ptrs, sizes = host.get_page_buffer_meta(indices)
    flat = host.kv_buffer.view(-1).view(torch.uint8)
    base = flat.data_ptr()
    return [bytes(flat[p - base : p - base + s].numpy()) for p, s in zip(ptrs, sizes, strict=True)]


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_pages_round_trip_byte_exact_through_sglangs_host_pool(daemon: Daemon, layout: str) -> None:
    host = mha_host(layout)
    be = backend(daemon.unix_url, host)
    keys = page_hashes(6)
    src = fill(host, 6, seed=1)
    info = HiCacheStorageExtraInfo(prefix_keys=None)
    assert be.batch_set_v1(keys, src, info) == [True] * 6
    assert be.batch_exists(keys, info) == 6
    assert be.batch_exists([*keys, *page_hashes(1, "x")], info) == 6
    assert be.batch_exists(page_hashes(1, "x") + keys, info) == 0
    dst = host.alloc(6 * PAGE)
    assert be.batch_get_v1(keys, dst, info) == [True] * 6
    assert page_bytes(host, dst) == page_bytes(host, src)
    stats = be.get_stats()
    assert stats is not None and stats.prefetch_pgs == [6] and stats.backup_pgs == [6]


def test_consecutive_hits_count_from_the_first_page_and_tails_are_evicted_first(
    make_daemon: Any,
) -> None:
    d = make_daemon()
    host = mha_host()
    be = backend(d.unix_url, host)
    keys = page_hashes(8)
    src = fill(host, 8, seed=2)
    # Two calls, as SGLang backs up a growing prompt: the second chains after prefix_keys.
    assert be.batch_set_v1(keys[:4], src[: 4 * PAGE], HiCacheStorageExtraInfo()) == [True] * 4
    after = HiCacheStorageExtraInfo(prefix_keys=keys[:4])
    assert be.batch_set_v1(keys[4:], src[4 * PAGE :], after) == [True] * 4
    with kvtier.Client(d.unix_url) as c:
        kv_keys = be._keys(keys)
        assert c.lookup_prefix(kv_keys).num_blocks == 16
        c.delete(kv_keys[5 * 2])  # The K block of page 5.
    assert be.batch_exists(keys) == 5
    # A hole: pages after it are not counted, and a get reports exactly the missing page.
    dst = host.alloc(8 * PAGE)
    assert be.batch_get_v1(keys, dst) == [True] * 5 + [False] + [True] * 2


def test_mla_rank_zero_stores_and_every_rank_reads(daemon: Daemon) -> None:
    hosts = [mla_host(), mla_host()]
    rank0 = backend(daemon.unix_url, hosts[0], mla=True, tp_rank=0, tp_size=2)
    rank1 = backend(daemon.unix_url, hosts[1], mla=True, tp_rank=1, tp_size=2)
    keys = page_hashes(3)
    src1 = fill(hosts[1], 3, seed=3)
    assert rank1.batch_set_v1(keys, src1) == [True] * 3  # Not the writer: nothing stored.
    assert rank0.batch_exists(keys) == 0
    src0 = fill(hosts[0], 3, seed=4)
    assert rank0.batch_set_v1(keys, src0) == [True] * 3
    assert rank1.batch_exists(keys) == 3
    dst = hosts[1].alloc(3 * PAGE)
    assert rank1.batch_get_v1(keys, dst) == [True] * 3
    assert page_bytes(hosts[1], dst) == page_bytes(hosts[0], src0)


def test_another_model_tp_shard_pp_stage_or_tenant_never_matches(daemon: Daemon) -> None:
    host = mha_host()
    keys = page_hashes(2)
    src = fill(host, 2, seed=5)
    mine = backend(daemon.unix_url, host, tp_rank=0, tp_size=2)
    assert mine.batch_set_v1(keys, src) == [True] * 2
    assert backend(daemon.unix_url, host, tp_rank=0, tp_size=2).batch_exists(keys) == 2
    for other in (
        backend(daemon.unix_url, host, tp_rank=1, tp_size=2),
        backend(daemon.unix_url, host, tp_rank=0, tp_size=4),
        backend(daemon.unix_url, host, tp_rank=0, tp_size=2, model="llama-3-70b"),
        backend(daemon.unix_url, host, tp_rank=0, tp_size=2, pp_rank=1, pp_size=2),
        backend(daemon.unix_url, host, tp_rank=0, tp_size=2, token="acme-token"),
        backend(daemon.unix_url, mha_host(heads=4), tp_rank=0, tp_size=2),
    ):
        assert other.batch_exists(keys) == 0
        assert other.batch_get_v1(keys, host.alloc(2 * PAGE)) == [False, False]


def test_whole_page_tensors_through_the_original_interface(daemon: Daemon) -> None:
    host = mha_host()
    be = backend(daemon.unix_url, host, interface_v1=0)
    keys = page_hashes(3)
    pages = [torch.randn(2, LAYERS, PAGE, 2, 64).to(torch.bfloat16) for _ in keys]
    assert be.set(keys[0], pages[0])
    assert be.batch_set(keys[1:], pages[1:])
    assert be.exists(keys[2]) and not be.exists(page_hashes(1, "x")[0])
    out = [torch.empty_like(p) for p in pages]
    assert be.get(keys[0], out[0]) is out[0]
    assert be.batch_get(keys[1:], out[1:]) == out[1:]
    assert all(torch.equal(a, b) for a, b in zip(out, pages, strict=True))
    wrong_size = torch.empty(7, dtype=torch.bfloat16)
    assert be.get(keys[0], wrong_size) is None
    be.clear()
    assert not be.exists(keys[0])


def test_a_stopped_or_paused_kvtierd_means_misses_not_a_hang(make_daemon: Any) -> None:
    d = make_daemon()
    host = mha_host()
    be = backend(d.unix_url, host)
    keys = page_hashes(4)
    src = fill(host, 4, seed=6)
    assert be.batch_set_v1(keys[:2], src[: 2 * PAGE]) == [True] * 2
    d.stop()
    start = time.monotonic()
    assert be.batch_exists(keys) == 0
    dst = host.alloc(4 * PAGE)
    assert be.batch_get_v1(keys, dst) == [False] * 4
    assert be.batch_set_v1(keys[2:], src[2 * PAGE :]) == [False] * 2
    # Each call gave up after the configured 0.5 s of retries (bounded, generously).
    assert time.monotonic() - start < 30
    d.start()  # A restarted kvtierd (no G3 here: the pages are gone) serves the backend again.
    assert be.batch_set_v1(keys, src) == [True] * 4
    assert be.batch_exists(keys) == 4
    d.pause()  # Stopped (SIGSTOP): connections stay open, nothing answers.
    assert be.batch_exists(keys) == 0
    assert be.batch_get_v1(keys, dst) == [False] * 4
    assert be.batch_set_v1(keys, src) == [False] * 4
    d.resume()
    assert be.batch_exists(keys) == 4


def test_a_missing_url_is_a_clear_error() -> None:
    host = mha_host()
    config = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="m", extra_config={"backend_name": "kvtier", "module_path": "kvtier.sglang",
                                      "class_name": "KvtierHiCacheStorage"},
    )  # fmt: skip
    with pytest.raises(ValueError, match="needs a 'url'"):
        StorageBackendFactory.create_backend("dynamic", config, host)
