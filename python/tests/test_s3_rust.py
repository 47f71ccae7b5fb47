"""The Rust AWS SDK (aws-sdk-s3 from crates.io, pinned by tests/rust_s3_client/Cargo.lock)
against kvtierd's S3 endpoint, with the options NVIDIA Dynamo KVBM's G4 object client uses: a
custom endpoint, path-style addressing, static credentials, conditional creates for its
locks, the SDK's default checksums. scripts/test builds the program with cargo
(build/cargo-target, or KVTIER_RUST_S3_CLIENT names it); the test skips without it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_s3 import ACME, S3, client

CLIENT = Path(
    os.environ.get("KVTIER_RUST_S3_CLIENT")
    or ROOT / "build/cargo-target/release/kvtier-rust-s3-client"
)


def test_the_rust_aws_sdk_as_kvbm_uses_it(make_daemon: Any) -> None:
    if not os.access(CLIENT, os.X_OK):
        pytest.skip(f"skipped: no {CLIENT} (scripts/test builds it with cargo)")
    d = make_daemon(extra=S3)
    run = subprocess.run(
        [str(CLIENT), f"http://127.0.0.1:{d.s3_port}", *ACME, "kvbm-g4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.endswith("all checks passed\n"), run.stdout
    # What it stored is what another S3 client reads: the lock it took last, the blocks.
    s3 = client(d)
    assert s3.get_object(Bucket="kvbm-g4", Key="kvbm/locks/leader")["Body"].read() == b"worker-3"
    block = s3.get_object(Bucket="kvbm-g4", Key="kvbm/blocks/0")["Body"].read()
    assert block == bytes((i * 31 + 7) % 256 for i in range(256 << 10))
