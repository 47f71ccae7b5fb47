"""README's "Dynamo on kvtier": each worker command, as written there, read by Dynamo's own
argument parser (ai-dynamo 1.6.1: dynamo.vllm.args and dynamo.sglang.args, what `python -m
dynamo.vllm` and `python -m dynamo.sglang` run first), and what the parser made of it then
driving a real kvtierd through the engine classes it names (vllm 0.33.0, sglang 0.5.23).

The parsers run in a process of their own, as in a worker: Dynamo's vLLM parser builds vLLM's
engine arguments, which need VLLM_TARGET_DEVICE=cpu on a machine without a GPU. The README's
placeholders (MODEL, the socket path, TOKEN, the S3 endpoint and key pair) go through the
parsers as written and are replaced by this test's daemon in what they return.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import DEADLINE, ROOT, Daemon
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, HiCacheStorageExtraInfo
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from test_s3 import ACME, S3, client
from test_s3_engines import obj_params  # Before test_vllm: it makes NIXL's cu12 build `nixl`.
from test_sglang import PAGE, fill, mha_host, page_bytes, page_hashes
from test_vllm import Engine, content, engines, evicted_and_loaded_back  # noqa: F401  (the fixture)
from transformers import LlamaConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

import kvtier
from kvtier.sglang import KvtierHiCacheStorage

# What the parsers return, printed by the worker process after this marker.
MARK = "kvtier-parsed "
PARSE = f"""
import asyncio, json, sys

out = []
for argv in json.loads(sys.argv[1]):
    module, args = argv[2], argv[3:]
    if module == "dynamo.vllm":
        from dynamo.vllm.args import parse_args

        e = parse_args(args).engine_args
        t = e.kv_transfer_config
        out.append({{"model": e.model, "kv_connector": t.kv_connector, "kv_role": t.kv_role,
                    "extra": t.kv_connector_extra_config,
                    "module_path": t.kv_connector_module_path}})
    else:
        from dynamo.sglang import args as sglang_args

        s = asyncio.run(sglang_args.parse_args(args)).server_args
        out.append({{k: getattr(s, k) for k in ("model_path", "enable_hierarchical_cache",
            "hicache_mem_layout", "hicache_storage_backend",
            "hicache_storage_backend_extra_config")}})
print({MARK!r} + json.dumps(out))
"""


def readme_blocks(language: str) -> list[str]:
    """The code blocks in `language` of README's "Dynamo on kvtier"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Dynamo on kvtier\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def readme_commands() -> list[list[str]]:
    """The `python -m dynamo.*` commands of README's "Dynamo on kvtier", as argv lists."""
    blocks = readme_blocks("sh")
    commands = [shlex.split(b.replace("\\\n", " ")) for b in blocks]
    assert len(commands) == 5 and all(c[:2] == ["python", "-m"] for c in commands)
    return commands


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each README command parsed by Dynamo, keyed by what it configures. MODEL is a local
    model directory (a configuration, no weights: the parsers read no more)."""
    model = tmp_path_factory.mktemp("model")
    LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=512,
    ).save_pretrained(model)  # fmt: skip
    commands = [[str(model) if a == "MODEL" else a for a in c] for c in readme_commands()]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    run = subprocess.run(
        [sys.executable, "-c", PARSE, json.dumps(commands)],
        capture_output=True, text=True, env=env, timeout=DEADLINE * 6,
    )  # fmt: skip
    lines = [x for x in run.stdout.splitlines() if x.startswith(MARK)]
    assert run.returncode == 0 and lines, run.stdout[-2000:] + run.stderr[-4000:]
    results = json.loads(lines[0][len(MARK) :])
    assert [r.get("model", r.get("model_path")) for r in results] == [str(model)] * 5

    def kind(r: dict[str, Any]) -> str:
        tiers = (r.get("extra") or {}).get("secondary_tiers")
        return str(tiers[0]["type"] if tiers else r.get("kv_connector", "sglang"))

    return {kind(r): r for r in results}


def placed(value: Any, substitutions: dict[str, str]) -> Any:
    """`value` with README's placeholders replaced, wherever they are in it."""
    text = json.dumps(value)
    for placeholder, actual in substitutions.items():
        text = text.replace(json.dumps(placeholder)[1:-1], json.dumps(actual)[1:-1])
    return json.loads(text)


def daemon_of(d: Daemon) -> dict[str, str]:
    return {"unix:///path/to/kvtier-data/kvtierd.sock": d.unix_url, "TOKEN": "acme-token"}


def test_the_vllm_worker_stores_its_blocks_in_kvtierd_and_loads_them_back(
    parsed: dict[str, dict[str, Any]],
    daemon: Daemon,
    engines: Callable[..., Engine],  # noqa: F811
) -> None:
    worker = parsed["KvtierTier"]
    assert (worker["kv_connector"], worker["kv_role"]) == ("OffloadingConnector", "kv_both")
    extra = placed(worker["extra"], daemon_of(daemon))
    assert extra["spec_name"] == "TieringOffloadingSpec" and extra["self_describing_kv_events"]
    [tier] = extra["secondary_tiers"]
    e = engines("", tier=tier)
    a = e.store("A", [1, 2, 3])
    assert kvtier.Client(daemon.unix_url, "acme-token").stats()["blocks"] == 3
    assert evicted_and_loaded_back(e, a) == [content(1), content(2)]


def test_the_vllm_workers_obj_tier_stores_on_kvtierds_s3_endpoint(
    parsed: dict[str, dict[str, Any]],
    make_daemon: Any,
    engines: Callable[..., Engine],  # noqa: F811
) -> None:
    d: Daemon = make_daemon(extra=S3)
    ours = obj_params(d, "kv-blocks")
    extra = placed(
        parsed["obj"]["extra"],
        {
            "http://127.0.0.1:9000": ours["endpoint_override"],
            "kvtier-default": ACME[0],
            "a long random secret": ACME[1],
        },
    )
    [tier] = extra["secondary_tiers"]
    assert tier["store_config"] == ours
    bucket = tier["store_config"]["bucket"]
    client(d).create_bucket(Bucket=bucket)
    e = engines("", tier=tier)
    a = e.store("A", [1, 2, 3])
    assert client(d).list_objects_v2(Bucket=bucket, Prefix="vllm/")["KeyCount"] == 3
    assert evicted_and_loaded_back(e, a) == [content(1), content(2)]


def test_the_vllm_worker_reaches_lmcaches_server_through_vllms_mp_connector(
    parsed: dict[str, dict[str, Any]],
) -> None:
    """vLLM's LMCacheMPConnector needs a GPU worker; the LMCache server and its kvtier L2 are
    test_lmcache_mp.py's. Here: what Dynamo hands vLLM names that connector and the server's
    address as the connector reads it (LMCache's server listens on tcp://localhost:5555 by
    default)."""
    worker = parsed["LMCacheMPConnector"]
    connector = KVConnectorFactory.get_connector_class_by_name(worker["kv_connector"])
    assert connector.__name__ == "LMCacheMPConnector"
    assert worker["extra"] == {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": 5555}


def test_the_sglang_workers_hicache_moves_pages_through_kvtierd(
    parsed: dict[str, dict[str, Any]], daemon: Daemon
) -> None:
    server = parsed["sglang"]
    assert server["enable_hierarchical_cache"] and server["hicache_mem_layout"] == "page_first"
    extra = placed(json.loads(server["hicache_storage_backend_extra_config"]), daemon_of(daemon))
    host = mha_host(server["hicache_mem_layout"])
    config = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name=Path(server["model_path"]).name, extra_config=extra,
    )  # fmt: skip
    be = StorageBackendFactory.create_backend(server["hicache_storage_backend"], config, host)
    be.register_mem_pool_host(host)
    assert isinstance(be, KvtierHiCacheStorage)
    keys = page_hashes(4)
    src = fill(host, 4, seed=3)
    info = HiCacheStorageExtraInfo(prefix_keys=None)
    assert be.batch_set_v1(keys, src, info) == [True] * 4
    dst = host.alloc(4 * PAGE)
    assert be.batch_get_v1(keys, dst, info) == [True] * 4
    assert page_bytes(host, dst) == page_bytes(host, src)
    # Another worker's backend (its own connection and host pool) finds them in kvtierd.
    other_host = mha_host(server["hicache_mem_layout"])
    other = StorageBackendFactory.create_backend(
        server["hicache_storage_backend"], config, other_host
    )
    other.register_mem_pool_host(other_host)
    assert other.batch_exists(keys, info) == 4
    back = other_host.alloc(4 * PAGE)
    assert other.batch_get_v1(keys, back, info) == [True] * 4
    assert page_bytes(other_host, back) == page_bytes(host, src)


def test_the_vllm_worker_hands_kvbm_its_connector_and_kvbms_g4_is_s3_on_kvtierd(
    parsed: dict[str, dict[str, Any]],
) -> None:
    """KVBM's connector (the kvbm wheel, not installed here) named as Dynamo passes it on; and
    README's KVBM G4 configuration in the layout of Dynamo's lib/kvbm-config (ObjectConfig:
    `client`, tagged by `type`, S3ObjectConfig's fields), pointed at kvtierd's S3 endpoint."""
    worker = parsed["DynamoConnector"]
    assert worker["module_path"] == "kvbm.vllm_integration.connector"
    assert worker["kv_role"] == "kv_both"
    [block] = readme_blocks("toml")
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on.
    config = tomllib.loads(textwrap.dedent(block))
    assert config == {
        "object": {
            "client": {
                "type": "s3",
                "endpoint_url": "http://127.0.0.1:9000",
                "bucket": "kvbm-blocks",
                "region": "us-east-1",
                "force_path_style": True,
            }
        }
    }
