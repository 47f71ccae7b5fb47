"""Engine tiers that speak S3, on kvtierd's S3 endpoint, with nothing of kvtier in the engine:
NIXL's OBJ plugin (nixl-cu12 1.5.1 from PyPI, aws-sdk-cpp inside; DRAM_SEG and OBJ_SEG run on a
CPU) and vLLM 0.33.0's `obj` secondary tier, driven through vLLM's own classes as kvtier.vllm is
in test_vllm.py.

vLLM imports `nixl`, the meta package that picks nixl-cu12 or nixl-cu13 by torch's CUDA
version; torch here is a CUDA 13 build, and the CUDA 13 build's OBJ plugin links NVIDIA's
libcuobjclient, which PyPI does not have. So `nixl` is nixl_cu12 here, as it is on a CUDA 12
host."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import nixl_cu12
import nixl_cu12._api
import nixl_cu12._bindings
import numpy as np
import pytest
from conftest import Daemon
from test_s3 import ACME, S3, client

sys.modules.setdefault("nixl", nixl_cu12)
sys.modules.setdefault("nixl._api", nixl_cu12._api)

from test_vllm import Engine, content, engines, evicted_and_loaded_back  # noqa: E402, F401  (the fixture)
from vllm.distributed.nixl_utils import NixlWrapper, nixl_agent_config  # noqa: E402


def obj_params(d: Daemon, bucket: str) -> dict[str, str]:
    return {
        "bucket": bucket,
        "endpoint_override": f"http://127.0.0.1:{d.s3_port}",
        "scheme": "http",
        "region": "us-east-1",
        "access_key": ACME[0],
        "secret_key": ACME[1],
    }


class Obj:
    """A NIXL agent with the OBJ backend: DRAM buffers to objects and back."""

    def __init__(self, params: dict[str, str]) -> None:
        self.agent = NixlWrapper(f"kvtier-obj-{os.getpid()}", nixl_agent_config(backends=[]))
        self.agent.create_backend("OBJ", {**params, "use_virtual_addressing": "false"})
        self.next_dev = 1

    def register(self, buf: np.ndarray[Any, Any]) -> None:
        self.agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")

    def object(self, key: str, size: int) -> int:
        dev = self.next_dev
        self.next_dev += 1
        self.agent.register_memory([(0, size, dev, key)], "OBJ")
        return dev

    def transfer(self, op: str, buf: np.ndarray[Any, Any], dev: int, offset: int = 0) -> str:
        local = self.agent.get_xfer_descs([(buf.ctypes.data, buf.nbytes, 0)], "DRAM")
        remote = self.agent.get_xfer_descs([(offset, buf.nbytes, dev)], "OBJ")
        handle = self.agent.initialize_xfer(op, local, remote, self.agent.name)
        state = self.agent.transfer(handle)
        while state == "PROC":  # NIXL's own completion poll (its transfers are asynchronous).
            state = self.agent.check_xfer_state(handle)
        self.agent.release_xfer_handle(handle)
        return str(state)

    def exists(self, keys: list[str]) -> list[bool]:
        found = self.agent.query_memory([(0, 1, 0, k) for k in keys], "OBJ", "OBJ")
        return [f is not None for f in found]


@pytest.fixture
def s3d(make_daemon: Any) -> Daemon:
    d: Daemon = make_daemon(extra=S3)
    client(d).create_bucket(Bucket="nixl-kv")
    return d


def test_nixl_obj_writes_reads_and_finds_objects_on_kvtierd(s3d: Daemon) -> None:
    obj = Obj(obj_params(s3d, "nixl-kv"))
    size = 2 << 20
    src = np.frombuffer(os.urandom(size), dtype=np.uint8).copy()
    back = np.zeros(size, dtype=np.uint8)
    part = np.zeros(4096, dtype=np.uint8)
    for buf in (src, back, part):
        obj.register(buf)
    dev = obj.object("layer0/block-7", size)
    assert obj.transfer("WRITE", src, dev) == "DONE"
    assert obj.transfer("READ", back, dev) == "DONE"
    assert bytes(back) == bytes(src)
    assert obj.transfer("READ", part, dev, offset=123_457) == "DONE"
    assert bytes(part) == bytes(src[123_457 : 123_457 + 4096])
    assert obj.exists(["layer0/block-7", "layer0/block-8"]) == [True, False]
    # What NIXL wrote is an ordinary object of the tenant, for every other client.
    got = client(s3d).get_object(Bucket="nixl-kv", Key="layer0/block-7")["Body"].read()
    assert got == bytes(src)


def test_nixl_obj_refused_with_a_wrong_secret(s3d: Daemon) -> None:
    obj = Obj({**obj_params(s3d, "nixl-kv"), "secret_key": "wrong"})
    src = np.ones(4096, dtype=np.uint8)
    obj.register(src)
    try:
        state = obj.transfer("WRITE", src, obj.object("k", 4096))
    except nixl_cu12._bindings.nixlBackendError:  # How NIXL reports the 403 while it polls.
        state = "ERR"
    assert state == "ERR"
    assert client(s3d).list_objects_v2(Bucket="nixl-kv")["KeyCount"] == 0


def test_vllms_obj_tier_stores_on_kvtierd_and_loads_back_byte_exact(
    s3d: Daemon,
    engines: Callable[..., Engine],  # noqa: F811
) -> None:
    tier = {
        "type": "obj",
        "store_config": obj_params(s3d, "nixl-kv"),
        "prefix": "vllm",
        "io_threads": 2,
    }
    e = engines("", tier=tier)
    a = e.store("A", [1, 2, 3])
    assert client(s3d).list_objects_v2(Bucket="nixl-kv", Prefix="vllm/")["KeyCount"] == 3
    assert evicted_and_loaded_back(e, a) == [content(1), content(2)]
