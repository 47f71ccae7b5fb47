"""kvtier.Client against a real kvtierd: values, batches, sessions, pins, errors, restarts."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import numpy as np
import pytest
import torch
from conftest import DEADLINE, Daemon

import kvtier
import kvtier.lmcache

NS = kvtier.Namespace(
    "default", "test-model@1", num_layers=2, num_kv_heads=2, head_dim=8, tokens_per_block=16
)


def keys(n: int, start: int = 0) -> list[bytes]:
    return kvtier.block_keys(NS, list(range(start, start + 16 * n)))


def value(seed: int, size: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("via", ["unix", "tcp"])
def test_values_round_trip(daemon: Daemon, via: str) -> None:
    url = daemon.unix_url if via == "unix" else daemon.tcp_url
    with kvtier.Client(url) as c:
        assert c.server_info.tenant == "default"
        c.ping()
        k = keys(4)
        vals = [value(i, 1000 * (i + 1)) for i in range(4)]
        c.put_many(k, vals, chain=True, dtype="bf16")
        assert c.get_many(k + [b"\0" * 32]) == vals + [None]
        assert c.get(k[2]) == vals[2]
        assert c.get(b"\1" * 32) is None
        assert c.exists(k[0]) and not c.exists(b"\1" * 32)
        assert c.exists_many(k[:2] + [b"\1" * 32]) == [kvtier.Tier.G2, kvtier.Tier.G2, None]
        m = c.lookup_prefix(k[:2] + [b"\1" * 32] + k[2:])
        assert m.num_blocks == 2 and m.tiers == [kvtier.Tier.G2] * 2
        assert c.lookup_prefix(namespace=NS, tokens=list(range(16 * 4 + 5))).num_blocks == 4
        assert c.delete(k[3]) is True and c.delete(k[3]) is False
        assert c.delete_many([k[2], k[3]]) == [True, False]
        c.put(k[0], b"another value")  # Blocks are immutable: the first value stays.
        assert c.get(k[0]) == vals[0]
        stats = c.stats()
        assert stats["tenant"] == "default" and stats["blocks"] == 2


def test_buffers_of_every_kind_cross_without_copies(daemon: Daemon) -> None:
    with kvtier.Client(daemon.unix_url) as c:
        k = keys(5)
        t = torch.arange(512, dtype=torch.bfloat16)
        arrays = [
            b"bytes value",
            bytearray(b"bytearray value"),
            memoryview(b"memoryview value!"),
            np.arange(100, dtype=np.float32),
            t,
        ]
        c.put_many(k, arrays)
        outs = [
            bytearray(64),
            np.zeros(64, np.uint8),
            torch.zeros(17, dtype=torch.uint8),
            np.zeros(100, np.float32),
            torch.zeros(512, dtype=torch.bfloat16),
        ]
        assert c.get_into(k, outs) == [11, 15, 17, 400, 1024]
        assert bytes(outs[0][:11]) == b"bytes value"
        assert bytes(outs[1][:15]) == b"bytearray value"
        assert bytes(outs[2].numpy()) == b"memoryview value!"
        assert np.array_equal(outs[3], np.arange(100, dtype=np.float32))
        assert torch.equal(outs[4], t)
        # A miss leaves its buffer untouched.
        untouched = np.full(8, 7, np.uint8)
        assert c.get_into([b"\2" * 32], [untouched]) == [None]
        assert (untouched == 7).all()


def test_bad_buffers_and_keys_are_clear_errors(daemon: Daemon) -> None:
    with kvtier.Client(daemon.unix_url) as c:
        k = keys(3)
        c.put_many(k, [b"x" * 100] * 3)
        with pytest.raises(kvtier.InvalidArgument, match="read-only"):
            c.get_into(k[:1], [b"\0" * 100])
        with pytest.raises(kvtier.InvalidArgument, match="contiguous"):
            c.get_into(k[:1], [np.zeros((20, 20), np.uint8)[:, ::2]])
        with pytest.raises(kvtier.InvalidArgument, match="contiguous"):
            c.put(k[0], torch.zeros(10, 10).t())
        with pytest.raises(kvtier.InvalidArgument, match="not a buffer"):
            c.put(k[0], 12345)
        with pytest.raises(kvtier.InvalidArgument, match="32 bytes"):
            c.get(b"short key")
        with pytest.raises(kvtier.InvalidArgument, match="sequence"):
            c.get_many(k[0])  # One key where a list is expected.
        with pytest.raises(kvtier.InvalidArgument, match="3 keys but 2"):
            c.put_many(k, [b"a", b"b"])
        with pytest.raises(kvtier.InvalidArgument):
            c.put(keys(1, 999)[0], b"")  # kvtier does not store empty values.
        for bad, why in ((-1, "outside 0 to 2"), (2**64, "outside 0 to 2"), (b"", "1 to 32"),
                         (b"x" * 33, "1 to 32"), ("text", "use an int or bytes")):  # fmt: skip
            with pytest.raises(kvtier.InvalidArgument, match=why):
                c.put_many(k[:1], [b"x"], engine_hashes=[bad])
        with pytest.raises(kvtier.InvalidArgument, match="one engine hash"):
            c.put_many(k, [b"x"] * 3, engine_hashes=[1])
        # A buffer too small fails that item only; the others are read, nothing is half written.
        small, big = np.full(50, 9, np.uint8), np.zeros(100, np.uint8)
        with pytest.raises(kvtier.OutOfRange) as e:
            c.get_into([k[0], k[1]], [small, big])
        assert set(e.value.failures) == {0}
        assert (small == 9).all() and bytes(big) == b"x" * 100
        assert isinstance(e.value, ValueError)


def test_urls_tokens_and_closed_clients(daemon: Daemon) -> None:
    with pytest.raises(kvtier.InvalidArgument, match="unknown kvtier URL"):
        kvtier.Client("redis://127.0.0.1:6379")
    with pytest.raises(kvtier.InvalidArgument):
        kvtier.Client("tcp://no-port")
    with pytest.raises(kvtier.Unauthenticated):
        kvtier.Client(daemon.tcp_url, "wrong-token")
    with pytest.raises(kvtier.Unavailable) as e:
        kvtier.Client("unix:///nonexistent/kvtierd.sock")
    assert isinstance(e.value, ConnectionError)
    c = kvtier.Client(daemon.tcp_url, "acme-token")
    assert c.server_info.tenant == "acme"
    c.close()
    with pytest.raises(kvtier.FailedPrecondition, match="closed"):
        c.get(keys(1)[0])


def test_tenants_never_see_each_others_blocks(daemon: Daemon) -> None:
    acme = kvtier.Client(daemon.tcp_url, "acme-token")
    other = kvtier.Client(daemon.tcp_url, "other-token", tenant="other")
    k = keys(2)
    acme.put_many(k, [b"acme 0", b"acme 1"])
    assert other.get_many(k) == [None, None]
    assert other.lookup_prefix(k).num_blocks == 0
    other.put(k[0], b"other 0")
    assert acme.get(k[0]) == b"acme 0" and other.get(k[0]) == b"other 0"
    assert other.delete(k[1]) is False and acme.get(k[1]) == b"acme 1"
    assert acme.delete_all().memory_blocks == 2
    assert other.get(k[0]) == b"other 0"


def test_sessions_and_pins(daemon: Daemon) -> None:
    with kvtier.Client(daemon.unix_url) as c:
        a, b = keys(3), keys(2, 1000)
        c.put_many(a, [b"a"] * 3, session=7)
        c.put_many(b, [b"b"] * 2, session=8)
        report = c.delete_session(7)
        assert report.memory_blocks == 3
        assert c.get_many(a) == [None] * 3 and c.get_many(b) == [b"b"] * 2
        with pytest.raises(kvtier.InvalidArgument):
            c.delete_session(0)
        c.pin(b)
        assert c.stats()["pinned_blocks"] == 2
        c.unpin(b)
        with pytest.raises(kvtier.FailedPrecondition) as e:
            c.unpin(b)
        assert set(e.value.failures) == {0, 1}


def test_session_hints(daemon: Daemon) -> None:
    with (
        kvtier.Client(daemon.unix_url) as c,
        kvtier.Client(daemon.tcp_url, "acme-token") as acme,
    ):
        c.put_many(keys(3), [b"a"] * 3, session=7)
        c.hint_session(7, retain_s=30, priority="high")
        c.hint_session(7, priority="low")
        c.hint_session(7, finished=True)
        # A hint orders evictions within the tenant; it removes nothing.
        assert c.get_many(keys(3)) == [b"a"] * 3
        with pytest.raises(kvtier.NotFound, match="no block in G2"):
            acme.hint_session(7, finished=True)  # the anonymous tenant's session, not acme's
        with pytest.raises(kvtier.InvalidArgument, match="empty"):
            c.hint_session(7)
        with pytest.raises(kvtier.InvalidArgument, match="finished"):
            c.hint_session(7, finished=True, retain_s=5)
        with pytest.raises(kvtier.InvalidArgument, match="max_hint_retain_seconds"):
            c.hint_session(7, retain_s=365 * 86400)
        with pytest.raises(kvtier.InvalidArgument, match="'urgent'"):
            c.hint_session(7, priority="urgent")  # type: ignore[arg-type]


def test_a_client_is_shared_by_threads(daemon: Daemon) -> None:
    with kvtier.Client(daemon.tcp_url, connections=3) as c:
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                for i in range(20):
                    k = keys(1, 100000 * t + 16 * i)
                    v = value(t * 1000 + i, 20000)
                    c.put_many(k, [v])
                    buf = bytearray(20000)
                    assert c.get_into(k, [buf]) == [20000] and bytes(buf) == v
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors


def test_calls_release_the_gil_while_they_wait(daemon: Daemon) -> None:
    """While kvtierd is stopped (SIGSTOP) a ping waits; the main thread must meanwhile run
    Python code. A failsafe resumes the daemon after 30 s, so that a binding holding the GIL
    fails the test instead of hanging it."""
    with kvtier.Client(daemon.unix_url) as c:
        c.ping()
        daemon.pause()
        failsafe = subprocess.Popen(["sh", "-c", f"sleep 30; kill -CONT {daemon.pid}"])
        returned = threading.Event()
        started = threading.Event()

        def call() -> None:
            started.set()
            c.ping()
            returned.set()

        t = threading.Thread(target=call)
        t.start()
        started.wait()
        progress = sum(i * i for i in range(300000))  # Python work, many switch intervals long.
        waited = not returned.is_set()
        daemon.resume()
        failsafe.kill()
        t.join()
        assert progress > 0 and waited, "the main thread could not run while the call waited"


def test_calls_reconnect_and_retry_when_kvtierd_restarts(daemon: Daemon) -> None:
    c = kvtier.Client(daemon.unix_url, connections=2)
    once = kvtier.Client(daemon.unix_url, retry_timeout=0)
    k = keys(2)
    c.put(k[0], b"before the restart")
    assert daemon.stop() == 0
    with pytest.raises(kvtier.Unavailable):
        once.ping()
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(c.put(k[1], b"during the restart")))
    t.start()
    daemon.start()  # Same socket path: the client finds it again.
    t.join()
    assert result == [None]
    assert c.get(k[1]) == b"during the restart"
    once.ping()  # Its broken connection is replaced on the next call.


def test_flushed_blocks_survive_kill_9(daemon: Daemon) -> None:
    c = kvtier.Client(daemon.unix_url)
    k = keys(3)
    for i, key in enumerate(k):
        c.put(key, f"durable {i}".encode())
    assert c.flush() == 3
    assert c.flush() == 0, "what G3 holds already is not written again"
    assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    daemon.start()
    c = kvtier.Client(daemon.unix_url)
    assert [c.get(key) for key in k] == [f"durable {i}".encode() for i in range(3)]


def test_a_rolling_upgrade_fails_no_call_and_keeps_every_block(daemon: Daemon) -> None:
    """Under load from the native protocol (Unix socket and TCP), shared memory and LMCache's
    native_plugin over shared memory."""
    urls = [daemon.unix_url, daemon.tcp_url]
    stop = threading.Event()
    progress = threading.Condition()
    calls = [0]
    failures: list[str] = []
    acked: list[tuple[bytes, bytes]] = []

    def load(n: int, client: Any) -> None:
        i = 0
        while not stop.is_set():
            key, value = kvtier.named_key(f"upgrade-{n}-{i}"), f"value {n} {i}".encode() * 500
            try:
                if isinstance(client, kvtier.lmcache.NativeConnector):
                    # As LMCache drives it: a batch set, then a batch get into a buffer.
                    name = f"upgrade-{n}-{i}"
                    done = lmcache_call(client, client.submit_batch_set([name], [value]))
                    assert done[1], done[2]
                    acked.append((key, value))
                    out = bytearray(len(value))
                    done = lmcache_call(client, client.submit_batch_get([name], [out]))
                    if not (done[1] and done[3] == [True] and out == value):
                        failures.append(f"lmcache get {n}/{i}: {done[2] or 'other bytes'}")
                else:
                    client.put(key, value)
                    acked.append((key, value))
                    out = bytearray(len(value))
                    got = client.get_into([key], [out])[0]
                    if got != len(value) or out != value:
                        failures.append(f"get {n}/{i}: other bytes")
            except (kvtier.Error, AssertionError) as e:
                failures.append(f"{n}/{i}: {e!r}")
            i += 1
            with progress:
                calls[0] += 1
                progress.notify_all()

    def wait_for(n: int) -> None:
        with progress:
            assert progress.wait_for(lambda: calls[0] >= n, timeout=60), "no progress"

    clients: list[Any] = [kvtier.Client(u) for u in urls]
    clients.append(kvtier.ShmClient(daemon.unix_url))
    clients.append(kvtier.lmcache.NativeConnector(daemon.unix_url, num_workers=1))
    threads = [threading.Thread(target=load, args=(n, c)) for n, c in enumerate(clients)]
    for t in threads:
        t.start()
    wait_for(20)
    assert daemon.upgrade() == 0, "the old kvtierd did not stop cleanly"
    assert daemon.tcp_url == urls[1], "the new kvtierd serves the same socket"
    wait_for(calls[0] + 20)
    stop.set()
    for t in threads:
        t.join()
    clients[-1].close()
    assert failures == []
    c = kvtier.Client(daemon.unix_url)
    assert all(c.get(k) == v for k, v in acked), "an acknowledged block is gone"


def lmcache_call(connector: Any, job: int) -> tuple[int, bool, str, list[bool] | None]:
    """Waits for a NativeConnector job (on its event descriptor, as LMCache does; bounded)."""
    while True:
        ready, _, _ = select.select([connector.event_fd()], [], [], DEADLINE)
        assert ready, "the connector never completed the job"
        for done in connector.drain_completions():
            if done[0] == job:
                return tuple(done)  # type: ignore[return-value]


@pytest.mark.parametrize("via", ["unix", "tcp"])
def test_a_stopped_kvtierd_fails_calls_after_io_timeout_not_never(daemon: Daemon, via: str) -> None:
    url = daemon.unix_url if via == "unix" else daemon.tcp_url
    k = keys(1)
    c = kvtier.Client(url, retry_timeout=0, io_timeout=0.2)
    retrying = kvtier.Client(url, retry_timeout=0.3, io_timeout=0.2)
    c.put(k[0], b"stored")
    time.sleep(0.5)  # Idle for longer than io_timeout: an idle connection is kept.
    assert c.get(k[0]) == b"stored"
    daemon.pause()
    with pytest.raises(kvtier.Unavailable, match="no reply from kvtierd"):
        c.get(k[0])
    # Retries reconnect: kvtierd's listener still accepts, its HELLO reply never comes.
    with pytest.raises(kvtier.Unavailable, match="no reply from kvtierd"):
        retrying.get(k[0])
    with pytest.raises(kvtier.Unavailable, match="no reply from kvtierd"):
        kvtier.Client(url, io_timeout=0.2)
    daemon.resume()
    assert retrying.get(k[0]) == b"stored"
    assert c.get(k[0]) == b"stored"  # Its closed connection is replaced.
    c.close()
    retrying.close()


def test_a_64_mib_value_is_not_copied_on_its_way(daemon: Daemon) -> None:
    """Peak memory of a client process that puts then reads a 64 MiB value into buffers it
    allocated first: a copying binding would need another 64 MiB for each direction."""
    script = textwrap.dedent(
        f"""
        import resource, numpy as np, kvtier
        c = kvtier.Client({daemon.tcp_url!r})
        size = 64 << 20
        src = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
        dst = np.ones(size, np.uint8)
        key = b"z" * 32
        c.ping()
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        c.put(key, src)
        after_put = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert c.get_into([key], [dst]) == [size]
        after_get = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert np.array_equal(src, dst)
        print((after_put - base) // 1024, (after_get - after_put) // 1024)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=os.environ, check=True
    )
    put_growth_mib, get_growth_mib = map(int, out.stdout.split())
    assert put_growth_mib < 16, f"put grew the client by {put_growth_mib} MiB"
    assert get_growth_mib < 16, f"get_into grew the client by {get_growth_mib} MiB"


def test_a_daemon_killed_mid_call_is_unavailable_not_a_crash(daemon: Daemon) -> None:
    c = kvtier.Client(daemon.unix_url, retry_timeout=0)
    k = keys(1)
    c.put(k[0], value(1, 1 << 20))
    daemon.pause()  # The next call waits for kvtierd...
    errors: list[BaseException] = []
    buf = np.zeros(1 << 20, np.uint8)

    def call() -> None:
        try:
            c.get_into(k, [buf])
        except kvtier.Error as e:
            errors.append(e)

    t = threading.Thread(target=call)
    t.start()
    daemon.stop(signal.SIGKILL)  # ...which dies before answering.
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], kvtier.Unavailable)
    daemon.start()
    c.put(k[0], b"after the crash")  # The client carries on with the new daemon.
    assert c.get(k[0]) in (b"after the crash", value(1, 1 << 20))


def queued_bytes(port: int) -> int:
    """Bytes waiting in kvtierd's receive queues of connections to `port` (ss -tn)."""
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(line.split()[0]) for line in out.splitlines() if line.strip())


def test_a_client_killed_mid_put_leaves_nothing_half_written(daemon: Daemon) -> None:
    """A client process dies (SIGKILL) with a 64 MiB put sent in part: the block must not
    exist, neither cut short nor whole, and kvtierd keeps serving."""
    key = kvtier.named_key("killed mid-put")
    port = int(daemon.ports["native_port"])
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, kvtier
        c = kvtier.Client({daemon.tcp_url!r}, retry_timeout=0)
        value = np.ones(64 << 20, np.uint8)
        print("connected", flush=True)
        sys.stdin.readline()
        c.put({key!r}, value)
        """
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdin is not None and writer.stdout is not None
    assert writer.stdout.readline() == "connected\n"
    daemon.pause()  # Now the put can send only what the socket buffers hold...
    try:
        writer.stdin.write("go\n")
        writer.stdin.flush()
        deadline = time.monotonic() + DEADLINE
        while queued_bytes(port) < (64 << 10):  # ...and part of it has arrived.
            assert time.monotonic() < deadline, "the put never started"
            time.sleep(0.01)  # Polling the socket queue, bounded.
        writer.kill()
        writer.wait()
    finally:
        daemon.resume()
    with kvtier.Client(daemon.tcp_url) as c:
        c.ping()
        assert c.get(key) is None


def test_a_request_slower_than_slow_request_ms_is_logged_with_where_it_waited(
    make_daemon: Any,
) -> None:
    """A client that sends a SET's head, stops for 300 ms once kvtierd has read it, then sends
    the value: kvtierd logs the request as slow, with the time spent receiving it apart from the
    time spent handling it, and counts it in /metrics."""
    d: Daemon = make_daemon(extra="slow_request_ms = 100")
    value = b"v" * (64 << 10)
    with socket.create_connection(("127.0.0.1", d.resp_port), timeout=DEADLINE) as s:
        s.sendall(b"*3\r\n$3\r\nSET\r\n$4\r\nslow\r\n$%d\r\n" % len(value))
        deadline = time.monotonic() + DEADLINE
        # Loopback queues the head before sendall returns; once kvtierd has read it, its clock
        # runs.
        while queued_bytes(d.resp_port) != 0:
            assert time.monotonic() < deadline, "kvtierd never read the request's head"
            time.sleep(0.01)  # Polling the socket queue, bounded.
        time.sleep(0.3)  # The slow client itself, not a wait for kvtierd.
        s.sendall(value + b"\r\n")
        assert s.recv(16) == b"+OK\r\n"
    with kvtier.Client(d.unix_url) as c:
        assert c.get(kvtier.named_key("slow")) == value  # Stored as any other request.
    assert d.metrics()['kvtier_slow_requests_total{protocol="resp"}'] == 1
    lines = [
        line
        for line in (d.dir / "kvtierd.log").read_text().splitlines()
        if "slow resp request" in line
    ]
    assert len(lines) == 1, lines
    received = re.search(r"reply, (\d+) ms receiving it", lines[0])
    assert received is not None and int(received.group(1)) >= 300, lines[0]
