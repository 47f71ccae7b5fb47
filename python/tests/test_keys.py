"""Keys from Python are the C++ library's keys: the vectors of docs/block_keys.md."""

from __future__ import annotations

import hashlib
import pickle
import socket

import numpy as np
import pytest
from conftest import Daemon

import kvtier

NS = kvtier.Namespace(
    "acme",
    "llama-3.1-8b-instruct@0e9e39f",
    num_layers=32,
    num_kv_heads=8,
    head_dim=128,
    dtype="bf16",
    tokens_per_block=4,
)


def test_vectors_of_docs_block_keys_md() -> None:
    assert NS.seed.hex() == "6168987b00b57303f0782aa758a86c83ca3b1974b1c3bb976337eda7d9041922"
    keys = kvtier.block_keys(NS, list(range(10)))
    assert [k.hex() for k in keys] == [
        "1710bad8fce2903e92c90cdf5a919e7a29a32df64990441fe7fb500b2026ff33",
        "b2bd66f0ca3303edab5b38c445d3ea6d3b13cd3cb0e2d058d53c78932f40b36a",
    ]  # Tokens 8 and 9 make a partial block: no key.
    extreme = kvtier.block_keys(NS, [4294967295, 1, 2147483648, 128000])
    assert extreme[0].hex() == "cff754c541618749228bafbdc8e17675e2be7f3e4c20423a9f3d4ee23859a333"
    opaque = kvtier.opaque_key(NS, bytes.fromhex("00112233445566778899aabbccddeeff"))
    assert opaque.hex() == "a54e7dc6c26775b26439510394a7b863a69ea6661ed97f8125a05994c59d27e9"
    other = kvtier.Namespace(
        "other", NS.model, num_layers=32, num_kv_heads=8, head_dim=128, tokens_per_block=4
    )
    assert other.seed.hex() == "f2290f151205f0e07ab270e379dbffa9067795ce75e67c3acfe94f62de529f6c"
    assert (
        kvtier.state_key(keys[0], "mamba").hex()
        == "e6b6a14fd5781cc2cae0ffbd1931f4661360324c69c20a954b6505103dce66ac"
    )
    assert (
        kvtier.state_key(keys[0], "swa/k").hex()
        == "a26ed4f08e09c42f39e91477965153294f2cba96b2f04024787b408015cfe708"
    )
    # The same bytes from the documented formula, computed here.
    group = b"mamba"
    mine = hashlib.sha256(b"kvtier/state/v1" + keys[0] + len(group).to_bytes(4, "little") + group)
    assert kvtier.state_key(keys[0], "mamba") == mine.digest()
    with pytest.raises(kvtier.InvalidArgument, match="state group name"):
        kvtier.state_key(keys[0], "not a name")


def test_tokens_as_lists_and_integer_arrays_give_the_same_keys() -> None:
    tokens = [5, 17, 4294967295, 0, 128000, 3, 9, 11]
    expected = kvtier.block_keys(NS, tokens)
    for dtype in (np.uint32, np.int64, np.int32 if max(tokens) < 2**31 else np.int64):
        assert kvtier.block_keys(NS, np.array(tokens, dtype=dtype)) == expected
    assert kvtier.block_keys(NS, tuple(tokens)) == expected
    assert kvtier.block_keys(NS, []) == []


@pytest.mark.parametrize(
    "tokens", [[1, -1, 2, 3], [1, 2**32, 3, 4], ["1", 2, 3, 4], np.zeros(4, np.float32), b"abcd"]
)
def test_bad_tokens_are_invalid_argument(tokens: object) -> None:
    with pytest.raises(kvtier.InvalidArgument):
        kvtier.block_keys(NS, tokens)


def test_namespace_checks_its_fields_and_pickles() -> None:
    with pytest.raises(kvtier.InvalidArgument, match="num_layers"):
        kvtier.Namespace("t", "m", num_layers=0, num_kv_heads=8, head_dim=128)
    with pytest.raises(kvtier.InvalidArgument, match="dtype"):
        kvtier.Namespace("t", "m", num_layers=1, num_kv_heads=1, head_dim=1, dtype="int4")
    with pytest.raises(kvtier.InvalidArgument):
        kvtier.Namespace("t", "m", num_layers=1, num_kv_heads=1, head_dim=1, tp_rank=2, tp_size=2)
    torch = pytest.importorskip("torch")
    same = kvtier.Namespace(
        "acme",
        NS.model,
        num_layers=32,
        num_kv_heads=8,
        head_dim=128,
        dtype=torch.bfloat16,
        tokens_per_block=4,
    )
    assert same == NS and hash(same) == hash(NS) and same.dtype == "bf16"
    assert pickle.loads(pickle.dumps(NS)) == NS
    assert NS.block_bytes == 2 * 32 * 8 * 128 * 2 * 4
    assert "llama-3.1-8b-instruct@0e9e39f" in repr(NS)


def test_opaque_keys_take_bytes_str_and_64_bit_ints() -> None:
    assert kvtier.opaque_key(NS, "abc") == kvtier.opaque_key(NS, b"abc")
    assert kvtier.opaque_key(NS, -1) == kvtier.opaque_key(NS, b"\xff" * 8)
    assert kvtier.opaque_key(NS, 2**64 - 1) == kvtier.opaque_key(NS, b"\xff" * 8)
    assert kvtier.opaque_key(NS, 1) == kvtier.opaque_key(NS, b"\x01" + b"\x00" * 7)
    for bad in (2**64, -(2**63) - 1, b"", b"x" * 1025):
        with pytest.raises(kvtier.InvalidArgument):
            kvtier.opaque_key(NS, bad)


def resp_set(port: int, key: bytes, value: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(
            b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)
        )
        assert s.recv(5) == b"+OK\r\n"


def test_named_keys_are_the_resp_keys(daemon: Daemon) -> None:
    name = b"lmcache@00000000@0@deadbeef"
    assert kvtier.named_key(name) == hashlib.sha256(b"kvtier/resp/v1" + name).digest()
    assert kvtier.named_key(name.decode()) == kvtier.named_key(name)
    resp_set(daemon.resp_port, name, b"set over RESP")
    with kvtier.Client(daemon.unix_url) as c:
        assert c.get(kvtier.named_key(name)) == b"set over RESP"
