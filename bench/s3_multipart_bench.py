#!/usr/bin/env python3
"""kvtierd's CPU per GB of S3 multipart uploads: boto3's upload_fileobj of OBJECTS objects of
SIZE_MIB MiB in 8 MiB parts (four threads, as boto3's transfer manager sends them), each object
new. With BUILD_DIRS named, the builds' daemons take turns, ROUNDS rounds, so that a change is
measured against its parent on the same machine state. kvtierd's CPU is the figure to compare:
on a small machine the rate is the client's.
Usage: build/venv/bin/python bench/s3_multipart_bench.py BUILD_DIR [BUILD_DIR...]
       [--objects 24] [--size-mib 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from pathlib import Path

import boto3
import kvtierd
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

KEY_ID, SECRET = "AKIDBENCH", "bench-secret-key"
PART = 8 << 20


def run(build: Path, objects: int, size: int) -> tuple[float, float]:
    """kvtierd's CPU milliseconds per GB uploaded, and the upload rate in MB/s."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        daemon, ports = kvtierd.start(
            build,
            d,
            f'data_dir = "{d}"\n[server]\nnative_listen = ""\nresp_listen = ""\n'
            'http_listen = ""\nunix_socket = ""\n'
            f'[s3]\nlisten = "127.0.0.1:0"\nmax_upload_bytes = "{4 * size}"\n'
            f'[store]\nmax_block_bytes = "{size + (1 << 20)}"\n'
            f'[memory]\ncapacity = "{(objects + 4) * size >> 20}MiB"\nprefault = true\n'
            'warm_restart = false\n[disk]\ndir = ""\n'
            f'[[tenants]]\nname = "default"\ns3_access_key = "{KEY_ID}"\n'
            f's3_secret_key = "{SECRET}"\n',
        )
        try:
            s3 = boto3.client(
                "s3",
                endpoint_url=f"http://127.0.0.1:{ports['s3_port']}",
                aws_access_key_id=KEY_ID,
                aws_secret_access_key=SECRET,
                region_name="us-east-1",
                config=Config(s3={"addressing_style": "path"}),
            )
            s3.create_bucket(Bucket="bench")
            config = TransferConfig(
                multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=4
            )
            base = os.urandom(size - 8)
            bodies = [base + i.to_bytes(8, "little") for i in range(objects)]
            cpu, start = kvtierd.cpu_seconds(daemon.pid), time.monotonic()
            for i, body in enumerate(bodies):
                s3.upload_fileobj(io.BytesIO(body), "bench", f"object-{i}", Config=config)
            wall = time.monotonic() - start
            gb = objects * size / 1e9
            return (kvtierd.cpu_seconds(daemon.pid) - cpu) / gb * 1e3, gb / wall * 1e3
        finally:
            daemon.terminate()
            daemon.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("builds", nargs="+", type=Path)
    parser.add_argument("--objects", type=int, default=24)
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"boto3 multipart: {args.objects} objects of {args.size_mib} MiB in 8 MiB parts")
    for _ in range(args.rounds):
        for build in args.builds:
            ms, rate = run(build.resolve(), args.objects, args.size_mib << 20)
            print(f"{build!s:40} kvtierd {ms:6.0f} ms CPU per GB  {rate:6.0f} MB/s", flush=True)


if __name__ == "__main__":
    main()
