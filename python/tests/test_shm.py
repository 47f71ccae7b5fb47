"""kvtier.ShmClient: views into the G2 arena that never outlive their lease, in-place puts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import Daemon

import kvtier


def test_leased_views_are_read_only_and_end_with_the_lease(daemon: Daemon) -> None:
    with kvtier.Client(daemon.unix_url) as c, kvtier.ShmClient(daemon.unix_url) as shm:
        c.put_many([b"a" * 32, b"b" * 32], [b"first value", b"second value, longer"])
        with shm.get([b"a" * 32, b"missing".ljust(32, b"\0"), b"b" * 32]) as lease:
            assert len(lease) == 3
            first = lease[0]
            assert first is not None and bytes(first) == b"first value"
            assert first.readonly
            with pytest.raises(TypeError):
                first[0] = 0  # type: ignore[index]
            assert lease[1] is None and lease.size(1) is None
            arr = np.frombuffer(lease[2], dtype=np.uint8)
            assert bytes(arr) == b"second value, longer"
            out = bytearray(64)
            assert lease.copy_into(2, out) == 20
            with pytest.raises(BufferError, match="still in use"):
                lease.release()  # `arr` still uses the block's memory.
            del arr
        assert lease.released
        with pytest.raises(ValueError):
            bytes(first)  # Released with the lease.


def test_a_slice_kept_alive_keeps_the_lease(daemon: Daemon) -> None:
    with kvtier.Client(daemon.unix_url) as c, kvtier.ShmClient(daemon.unix_url) as shm:
        c.put(b"k" * 32, b"0123456789")
        lease = shm.get([b"k" * 32])
        part = lease[0][2:5]  # type: ignore[index]
        with pytest.raises(BufferError):
            lease.release()
        assert bytes(part) == b"234"
        del part
        lease.release()
        assert c.delete(b"k" * 32)


def test_allocations_are_filled_in_place_and_invisible_until_committed(daemon: Daemon) -> None:
    with kvtier.Client(daemon.unix_url) as c, kvtier.ShmClient(daemon.unix_url) as shm:
        key = b"p" * 32
        a = shm.allocate(key, 4096)
        assert a is not None and a.size == 4096
        target = np.frombuffer(a.view, dtype=np.uint8)
        target[:] = np.arange(4096) % 251
        assert c.get(key) is None  # Not visible before the commit.
        with pytest.raises(BufferError):
            a.commit()  # `target` could still write into the block.
        del target
        a.commit()
        assert c.get(key) == bytes((np.arange(4096) % 251).astype(np.uint8))
        assert shm.allocate(key, 10) is None  # Stored already: nothing to write.
        with pytest.raises(ValueError), shm.allocate(b"q" * 32, 100) as failed:
            failed.write(b"x" * 100)
            raise ValueError("the producer failed")
        assert c.get(b"q" * 32) is None  # Aborted, not committed.


def test_get_into_and_put_many_move_tensors(daemon: Daemon) -> None:
    with kvtier.ShmClient(daemon.unix_url) as shm:
        keys = [bytes([i]) * 32 for i in range(8)]
        vals = [torch.randn(256, 64, dtype=torch.bfloat16) for _ in keys]
        shm.put_many(keys, vals, chain=True, dtype=torch.bfloat16)
        outs = [torch.empty(256, 64, dtype=torch.bfloat16) for _ in keys]
        assert shm.get_into(keys + [b"\xee" * 32], outs + [torch.empty(1)]) == [
            256 * 64 * 2
        ] * 8 + [None]
        assert all(torch.equal(a, b) for a, b in zip(vals, outs, strict=True))
        with pytest.raises(kvtier.OutOfRange):
            shm.get_into(keys[:1], [torch.empty(10, dtype=torch.uint8)])


def test_put_many_from_a_staging_buffer_stores_what_it_held(daemon: Daemon) -> None:
    with kvtier.Client(daemon.unix_url) as c, kvtier.ShmClient(daemon.unix_url) as shm:
        block = 64 * 128 * 2
        buf = shm.staging_buffer(4 * block)
        assert buf.size == 4 * block and buf.valid
        kv = np.frombuffer(buf.view, dtype=np.uint8).reshape(4, block)
        kv[:] = np.random.default_rng(5).integers(0, 256, kv.shape, dtype=np.uint8)
        expected = [bytes(row) for row in kv]
        keys = [bytes([0xB0 + i]) * 32 for i in range(4)]
        shm.put_many(keys, list(kv), chain=True)
        kv[:] = 0  # The buffer is the client's again: the blocks stay as they were put.
        assert c.get_many(keys) == expected
        with pytest.raises(BufferError, match="still in use"):
            buf.release()  # `kv` still uses the buffer's memory.
        del kv
        buf.release()
        assert not buf.valid
        with pytest.raises(kvtier.FailedPrecondition):
            _ = buf.view
        with pytest.raises(kvtier.InvalidArgument):
            shm.staging_buffer(0)
        with pytest.raises(kvtier.ResourceExhausted):
            shm.staging_buffer(1 << 40)


def test_shared_memory_needs_the_unix_socket_and_respects_tenants(daemon: Daemon) -> None:
    with pytest.raises(kvtier.InvalidArgument, match="Unix socket"):
        kvtier.ShmClient(daemon.tcp_url)
    with pytest.raises(kvtier.Unauthenticated):
        kvtier.ShmClient(daemon.unix_url, "wrong")
    acme = kvtier.ShmClient(daemon.unix_url, "acme-token")
    other = kvtier.ShmClient(daemon.unix_url, "other-token")
    assert acme.tenant == "acme"
    acme.put(b"s" * 32, b"acme's block")
    with other.get([b"s" * 32]) as lease:
        assert lease[0] is None
    acme.close()
    with pytest.raises(kvtier.FailedPrecondition):
        acme.get([b"s" * 32])
    other.close()
