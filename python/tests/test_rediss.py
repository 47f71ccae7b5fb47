"""RESP over TLS 1.3 (``[tls] resp = true``): ``rediss://`` clients, redis-py and redis-cli
--tls, reach their own tenant; plaintext and wrong credentials are refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import redis
from conftest import Daemon, self_signed_cert
from redis.backoff import NoBackoff
from redis.retry import Retry


@pytest.fixture
def tls_daemon(make_daemon: type[Daemon], tmp_path: Path) -> tuple[Daemon, Path]:
    cert, key = self_signed_cert(tmp_path)
    tls = f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\nresp = true\n'
    return make_daemon(extra=tls), cert


def test_rediss_clients_reach_their_tenant_and_nothing_else(
    tls_daemon: tuple[Daemon, Path],
) -> None:
    d, cert = tls_daemon
    url = f"rediss://acme:acme-token@127.0.0.1:{d.resp_port}/0"
    acme = redis.Redis.from_url(url, ssl_ca_certs=str(cert), protocol=2)
    assert acme.set("name", b"acme's value")
    assert acme.get("name") == b"acme's value"
    other = redis.Redis(
        host="127.0.0.1",
        port=d.resp_port,
        ssl=True,
        ssl_ca_certs=str(cert),
        username="other",
        password="other-token",
        protocol=2,
    )
    assert other.get("name") is None
    acme.close()
    other.close()

    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(
            f"rediss://acme:wrong@127.0.0.1:{d.resp_port}/0",
            ssl_ca_certs=str(cert),
            protocol=2,
            retry=Retry(NoBackoff(), 0),
        ).ping()
    # Plaintext on the TLS port gets nowhere (no retries: the first refusal is the answer).
    once = Retry(NoBackoff(), 0)
    with pytest.raises(redis.ConnectionError):
        redis.Redis(host="127.0.0.1", port=d.resp_port, protocol=2, retry=once).ping()

    cli = shutil.which("redis-cli")
    assert cli, "redis-cli is installed by scripts/deps.sh"
    got = subprocess.run(
        [cli, "--tls", "--cacert", str(cert), "-h", "127.0.0.1", "-p", str(d.resp_port)]
        + ["--user", "acme", "--pass", "acme-token", "--no-auth-warning", "get", "name"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert got.stdout.strip() == "acme's value"
