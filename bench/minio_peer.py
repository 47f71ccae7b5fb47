"""MinIO, the S3 peer that benchmarks and tests start (scripts/test builds it from its Go
module into build/go/bin; KVTIER_MINIO names another): its command line, its environment, and
one on a free loopback port. bench/netns.py starts it inside a network namespace instead."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from kvtierd import die_with_parent

ROOT = Path(__file__).resolve().parents[1]


def minio_path() -> str | None:
    path = os.environ.get("KVTIER_MINIO") or str(ROOT / "build/go/bin/minio")
    return path if os.access(path, os.X_OK) else shutil.which("minio")


def minio_command(minio: str, data: Path, address: str, console: str) -> list[str]:
    """MinIO serving `data` (each top-level directory a bucket) at `address`."""
    return [minio, "server", str(data), "--address", address, "--console-address", console]


def minio_env(user: str, password: str) -> dict[str, str]:
    """The root credentials; no browser; its Prometheus metrics readable without a token."""
    return {
        **os.environ,
        "MINIO_ROOT_USER": user,
        "MINIO_ROOT_PASSWORD": password,
        "MINIO_BROWSER": "off",
        "MINIO_PROMETHEUS_AUTH_TYPE": "public",
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_local_minio(
    data: Path, user: str, password: str, log: Path, buckets: Sequence[str] = ()
) -> tuple[subprocess.Popen[bytes], str] | None:
    """MinIO on a free loopback port serving `data`, with `buckets` made; the process and its
    endpoint URL once it answers its readiness probe. None when MinIO is not built."""
    minio = minio_path()
    if minio is None:
        return None
    for bucket in buckets:
        (data / bucket).mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{free_port()}"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            minio_command(minio, data, url[len("http://") :], f"127.0.0.1:{free_port()}")
            + ["--quiet"],
            env=minio_env(user, password),
            stdout=subprocess.DEVNULL,
            stderr=out,
            preexec_fn=die_with_parent,
        )
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/minio/health/ready", timeout=1)
            return proc, url
        except OSError as e:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"MinIO did not start: see {log}") from e
            time.sleep(0.1)  # Polling a starting server, bounded by the deadline.
