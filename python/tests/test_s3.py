"""kvtierd's S3 endpoint with real S3 clients: boto3 (botocore's SigV4, flexible checksums,
aws-chunked uploads) and raw HTTP for what a well-behaved client never sends."""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.client
import io
import itertools
import os
import re
import select
import socket
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import boto3
import boto3.s3.transfer
import botocore
import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from conftest import Daemon, self_signed_cert, wait_until

S3 = '[s3]\nlisten = "127.0.0.1:0"\nmax_object_bytes = "4MiB"\n'
ACME = ("AKIDACME", "acme-s3-secret")
OTHER = ("AKIDOTHER", "other-s3-secret")


def client(d: Daemon, keys: tuple[str, str] = ACME, cert: Any = None, **config: Any) -> Any:
    """boto3 against `d`'s S3 endpoint; over TLS, trusting `cert`, when one is given."""
    return boto3.client(
        "s3",
        endpoint_url=f"{'https' if cert else 'http'}://127.0.0.1:{d.s3_port}",
        aws_access_key_id=keys[0],
        aws_secret_access_key=keys[1],
        region_name="us-east-1",
        verify=str(cert) if cert else None,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 0}, **config),
    )


def error_code(call: Any) -> str:
    with pytest.raises(botocore.exceptions.ClientError) as e:
        call()
    return str(e.value.response["Error"]["Code"])


@pytest.fixture
def s3d(make_daemon: Any) -> Iterator[Daemon]:
    yield make_daemon(extra=S3)


def signed(
    d: Daemon,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    keys: tuple[str, str] = ACME,
) -> tuple[int, bytes]:
    """Sends one request signed by botocore (payload unsigned) and returns (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", d.s3_port, timeout=30)
    conn.request(
        method, path, body=body, headers=signed_headers(d, method, path, body, headers, keys)
    )
    response = conn.getresponse()
    out = (response.status, response.read())
    conn.close()
    return out


def signed_headers(
    d: Daemon,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    keys: tuple[str, str] = ACME,
) -> dict[str, str]:
    """The headers of a request signed by botocore, its payload unsigned."""
    url = f"http://127.0.0.1:{d.s3_port}{path}"
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    request.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
    S3SigV4Auth(Credentials(*keys), "s3", "us-east-1").add_auth(request)
    return dict(request.prepare().headers)


def put_head(
    d: Daemon, path: str, body: bytes, signed_for: bytes | None = None, expect: bool = False
) -> bytes:
    """The head of a PUT of `body` (Content-Length, signed by botocore with the SHA-256 of
    `signed_for`, the body itself by default; with `expect`, Expect: 100-continue), as its
    bytes."""
    sign = body if signed_for is None else signed_for
    extra = {"Content-Length": str(len(body))} | ({"Expect": "100-continue"} if expect else {})
    headers = signed_headers(d, "PUT", path, sign, extra)
    head = f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{d.s3_port}\r\n".encode()
    return head + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"


def raw(d: Daemon, data: bytes) -> bytes:
    """Sends raw bytes and returns everything the daemon answers before it closes."""
    with socket.create_connection(("127.0.0.1", d.s3_port), timeout=30) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def get_request(d: Daemon, path: str, headers: bytes = b"") -> bytes:
    """A bare GET of `path` (a presigned URL's path and query) as its bytes."""
    host = f"Host: 127.0.0.1:{d.s3_port}\r\n".encode()
    return b"GET " + path.encode() + b" HTTP/1.1\r\n" + host + headers + b"\r\n"


def test_objects_round_trip_through_boto3(s3d: Daemon) -> None:
    s3 = client(s3d)
    s3.create_bucket(Bucket="kv-blocks")
    s3.create_bucket(Bucket="kv-blocks")  # Idempotent for its owner.
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["kv-blocks"]
    s3.head_bucket(Bucket="kv-blocks")
    data = os.urandom(2 << 20)
    etag = s3.put_object(Bucket="kv-blocks", Key="layer/0/block 1", Body=data)["ETag"]
    # The ETag names the bytes: the same bytes under another key have the same one.
    assert s3.put_object(Bucket="kv-blocks", Key="copy", Body=data)["ETag"] == etag
    assert s3.put_object(Bucket="kv-blocks", Key="other", Body=data[:-1])["ETag"] != etag
    got = s3.get_object(Bucket="kv-blocks", Key="layer/0/block 1")
    assert got["Body"].read() == data
    assert got["ETag"] == etag and got["ContentLength"] == len(data)
    head = s3.head_object(Bucket="kv-blocks", Key="layer/0/block 1")
    assert head["ContentLength"] == len(data) and head["ETag"] == etag
    part = s3.get_object(Bucket="kv-blocks", Key="layer/0/block 1", Range="bytes=4096-8191")
    assert part["Body"].read() == data[4096:8192]
    assert part["ContentRange"] == f"bytes 4096-8191/{len(data)}"
    tail = s3.get_object(Bucket="kv-blocks", Key="layer/0/block 1", Range="bytes=-100")
    assert tail["Body"].read() == data[-100:]
    # The same bytes again change nothing; other bytes replace them.
    assert s3.put_object(Bucket="kv-blocks", Key="layer/0/block 1", Body=data)["ETag"] == etag
    assert (
        s3.head_object(Bucket="kv-blocks", Key="layer/0/block 1")["LastModified"]
        == head["LastModified"]
    )
    s3.put_object(Bucket="kv-blocks", Key="layer/0/block 1", Body=b"new bytes")
    assert s3.get_object(Bucket="kv-blocks", Key="layer/0/block 1")["Body"].read() == b"new bytes"
    s3.delete_object(Bucket="kv-blocks", Key="layer/0/block 1")
    assert (
        error_code(lambda: s3.get_object(Bucket="kv-blocks", Key="layer/0/block 1")) == "NoSuchKey"
    )
    assert error_code(lambda: s3.head_object(Bucket="kv-blocks", Key="layer/0/block 1")) == "404"
    # An empty object (Dynamo KVBM marks a stored block with one) is an object like any other.
    empty_etag = s3.put_object(Bucket="kv-blocks", Key="5:abc.meta", Body=b"")["ETag"]
    assert s3.head_object(Bucket="kv-blocks", Key="5:abc.meta")["ContentLength"] == 0
    got = s3.get_object(Bucket="kv-blocks", Key="5:abc.meta")
    assert got["Body"].read() == b"" and got["ETag"] == empty_etag


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"])
def test_every_flexible_checksum_is_verified_and_accepted(s3d: Daemon, algorithm: str) -> None:
    s3 = client(s3d)
    s3.create_bucket(Bucket="sums")
    data = os.urandom(300_001)
    s3.put_object(Bucket="sums", Key=algorithm, Body=data, ChecksumAlgorithm=algorithm)
    assert s3.get_object(Bucket="sums", Key=algorithm)["Body"].read() == data


def test_streaming_signed_upload_is_verified(s3d: Daemon) -> None:
    """Chunk signatures (STREAMING-AWS4-HMAC-SHA256-PAYLOAD), as botocore sends them when the
    payload is signed over plain HTTP with a trailer checksum turned off."""
    s3 = client(s3d, request_checksum_calculation="when_required")
    s3.create_bucket(Bucket="streams")
    data = os.urandom(1 << 20)
    s3.put_object(Bucket="streams", Key="k", Body=data)
    assert s3.get_object(Bucket="streams", Key="k")["Body"].read() == data


@pytest.mark.parametrize("size", [22, 1 << 20])  # Read whole; received straight into G2.
def test_a_wrong_checksum_stores_nothing(s3d: Daemon, size: int) -> None:
    s3 = client(s3d)
    s3.create_bucket(Bucket="bad-sums")
    body = os.urandom(size)
    # Signed for other bytes of the same length: the payload's SHA-256 does not match.
    reply = raw(s3d, put_head(s3d, "/bad-sums/k", body, signed_for=bytes(size)) + body)
    assert reply.startswith(b"HTTP/1.1 400 ") and b"<Code>XAmzContentSHA256Mismatch<" in reply
    wrong_md5 = base64.b64encode(hashlib.md5(b"another body").digest()).decode()
    status, text = signed(s3d, "PUT", "/bad-sums/k", body, {"Content-MD5": wrong_md5})
    assert status == 400 and b"<Code>BadDigest</Code>" in text
    status, text = signed(
        s3d,
        "PUT",
        "/bad-sums/k",
        body,
        {"x-amz-checksum-crc32": base64.b64encode(b"\0\0\0\0").decode()},
    )
    assert status == 400 and b"<Code>BadDigest</Code>" in text
    assert error_code(lambda: s3.get_object(Bucket="bad-sums", Key="k")) == "NoSuchKey"
    right_md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    assert signed(s3d, "PUT", "/bad-sums/k", body, {"Content-MD5": right_md5})[0] == 200
    assert s3.get_object(Bucket="bad-sums", Key="k")["Body"].read() == body


def test_conditional_create_has_one_winner(s3d: Daemon) -> None:
    s3 = client(s3d)
    s3.create_bucket(Bucket="locks")
    s3.put_object(Bucket="locks", Key="held", Body=b"first", IfNoneMatch="*")
    assert (
        error_code(
            lambda: s3.put_object(Bucket="locks", Key="held", Body=b"second", IfNoneMatch="*")
        )
        == "PreconditionFailed"
    )
    assert s3.get_object(Bucket="locks", Key="held")["Body"].read() == b"first"
    winners: list[int] = []
    errors: list[str] = []

    def race(i: int) -> None:
        c = client(s3d)
        try:
            c.put_object(Bucket="locks", Key="race", Body=str(i).encode(), IfNoneMatch="*")
            winners.append(i)
        except botocore.exceptions.ClientError as e:
            errors.append(str(e.response["Error"]["Code"]))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and errors == ["PreconditionFailed"] * 7
    assert s3.get_object(Bucket="locks", Key="race")["Body"].read() == str(winners[0]).encode()
    etag = s3.head_object(Bucket="locks", Key="held")["ETag"]
    assert (
        error_code(lambda: s3.get_object(Bucket="locks", Key="held", IfMatch='"0"'))
        == "PreconditionFailed"
    )
    assert error_code(lambda: s3.get_object(Bucket="locks", Key="held", IfNoneMatch=etag)) == "304"


def test_lists_and_deletes(s3d: Daemon) -> None:
    s3 = client(s3d)
    s3.create_bucket(Bucket="listing")
    names = [f"a/{i:03d}" for i in range(25)] + ["b/x", "b/y", "top"]
    for n in names:
        s3.put_object(Bucket="listing", Key=n, Body=n.encode())
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket="listing", PaginationConfig={"PageSize": 10}
    )
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == sorted(names)
    top = s3.list_objects_v2(Bucket="listing", Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/"]
    assert [o["Key"] for o in top["Contents"]] == ["top"]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="listing", Prefix="b/")["Contents"]] == [
        "b/x",
        "b/y",
    ]
    assert error_code(lambda: s3.delete_bucket(Bucket="listing")) == "BucketNotEmpty"
    deleted = s3.delete_objects(Bucket="listing", Delete={"Objects": [{"Key": n} for n in names]})
    assert sorted(d["Key"] for d in deleted["Deleted"]) == sorted(names)
    assert s3.list_objects_v2(Bucket="listing")["KeyCount"] == 0
    s3.delete_bucket(Bucket="listing")
    assert error_code(lambda: s3.head_bucket(Bucket="listing")) == "404"


def test_tenants_see_nothing_of_each_other(s3d: Daemon) -> None:
    acme, other = client(s3d, ACME), client(s3d, OTHER)
    acme.create_bucket(Bucket="private")
    acme.put_object(Bucket="private", Key="secret", Body=b"acme's")
    assert other.list_buckets()["Buckets"] == []
    assert error_code(lambda: other.get_object(Bucket="private", Key="secret")) == "NoSuchBucket"
    assert error_code(lambda: other.list_objects_v2(Bucket="private")) == "NoSuchBucket"
    assert error_code(lambda: other.delete_bucket(Bucket="private")) == "NoSuchBucket"
    # A bucket of the same name is the other tenant's own, and empty.
    other.create_bucket(Bucket="private")
    assert other.list_objects_v2(Bucket="private")["KeyCount"] == 0
    assert error_code(lambda: other.get_object(Bucket="private", Key="secret")) == "NoSuchKey"
    assert acme.get_object(Bucket="private", Key="secret")["Body"].read() == b"acme's"


def test_bad_signatures_are_refused(s3d: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (
        error_code(lambda: client(s3d, ("AKIDACME", "wrong")).list_buckets())
        == "SignatureDoesNotMatch"
    )
    assert (
        error_code(lambda: client(s3d, ("AKIDNOBODY", "x")).list_buckets()) == "InvalidAccessKeyId"
    )
    # A signature made 16 minutes ago (a clock that far off) is refused.
    skewed = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(
        minutes=16
    )
    with monkeypatch.context() as m:
        m.setattr(botocore.auth, "get_current_datetime", lambda: skewed)
        status, text = signed(s3d, "GET", "/")
    assert status == 403 and b"<Code>RequestTimeTooSkewed</Code>" in text
    # Unsigned requests are refused unless [s3] allow_anonymous.
    reply = raw(s3d, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403") and b"AccessDenied" in reply


def test_presigned_urls(s3d: Daemon) -> None:
    s3 = client(s3d, signature_version="s3v4")
    s3.create_bucket(Bucket="shared")
    s3.put_object(Bucket="shared", Key="k", Body=b"presigned bytes")
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": "shared", "Key": "k"}, ExpiresIn=60
    )
    path = url.split(f":{s3d.s3_port}", 1)[1]
    reply = raw(s3d, get_request(s3d, path, b"Connection: close\r\n"))
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"presigned bytes")
    tampered = path.replace("/shared/k", "/shared/j")
    reply = raw(s3d, get_request(s3d, tampered))
    assert reply.startswith(b"HTTP/1.1 403")


def test_bad_input_gets_s3_errors_and_the_daemon_serves_on(s3d: Daemon) -> None:
    s3 = client(s3d)
    s3.create_bucket(Bucket="robust")
    # An object over max_object_bytes is refused before its body is read.
    assert error_code(lambda: s3.put_object(Bucket="robust", Key="big", Body=b"x" * (5 << 20))) == (
        "EntityTooLarge"
    )
    # Malformed HTTP, a head over the limit, a malformed aws-chunked body, an unknown operation.
    assert raw(s3d, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 ")
    assert raw(s3d, b"GET / HTTP/1.1\r\nX: " + b"a" * (64 << 10) + b"\r\n\r\n").startswith(
        b"HTTP/1.1 431"
    )
    status, text = signed(
        s3d,
        "PUT",
        "/robust/chunked",
        b"zz;chunk-signature=\r\nabc\r\n",
        {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "3"},
    )
    assert status == 400 and b"IncompleteBody" in text
    status, text = signed(s3d, "GET", "/robust/k?tagging")
    assert status == 501 and b"<Code>NotImplemented</Code>" in text
    status, text = signed(s3d, "GET", "/robust/k", headers={"Range": "bytes=0-1"})
    assert status == 404
    s3.put_object(Bucket="robust", Key="small", Body=b"0123456789")
    status, text = signed(s3d, "GET", "/robust/small", headers={"Range": "bytes=10-20"})
    assert status == 416 and b"InvalidRange" in text
    assert error_code(lambda: s3.get_object(Bucket="robust", Key="big")) == "NoSuchKey"
    assert s3.get_object(Bucket="robust", Key="small")["Body"].read() == b"0123456789"


def test_keep_alive_and_pipelining(s3d: Daemon) -> None:
    s3 = client(s3d)
    s3.create_bucket(Bucket="pipes")
    s3.put_object(Bucket="pipes", Key="a", Body=b"AAA")
    url = client(s3d, signature_version="s3v4").generate_presigned_url(
        "get_object", Params={"Bucket": "pipes", "Key": "a"}
    )
    reply = raw(s3d, get_request(s3d, url.split(f":{s3d.s3_port}", 1)[1]) * 3)
    assert reply.count(b"HTTP/1.1 200 OK") == 3 and reply.count(b"AAA") == 3


def test_bodies_received_in_place_are_pipelined_cut_short_and_orphaned_safely(
    s3d: Daemon,
) -> None:
    """A PUT of a new name with a Content-Length body of 64 KiB or more is received straight
    into its G2 allocation (docs/protocol.md): a request pipelined behind it is answered, a body
    cut short stores nothing and leaves the name free, and a body whose bucket is deleted while
    it comes is not stored."""
    s3 = client(s3d)
    s3.create_bucket(Bucket="direct")
    body = os.urandom(1 << 20)
    get = client(s3d, signature_version="s3v4").generate_presigned_url(
        "get_object", Params={"Bucket": "direct", "Key": "a"}
    )
    # The PUT's first body bytes come with its head, and the GET right behind its last.
    reply = raw(
        s3d,
        put_head(s3d, "/direct/a", body)
        + body
        + get_request(s3d, get.split(f":{s3d.s3_port}", 1)[1]),
    )
    assert reply.count(b"HTTP/1.1 200 OK") == 2 and reply.endswith(body)
    # A client that waits for 100 Continue before it sends the body.
    with socket.create_connection(("127.0.0.1", s3d.s3_port), timeout=30) as sock:
        sock.sendall(put_head(s3d, "/direct/asked", body, expect=True))
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        assert sock.recv(64).startswith(b"HTTP/1.1 200 OK\r\n")
    assert s3.get_object(Bucket="direct", Key="asked")["Body"].read() == body
    # The client goes away halfway through a body.
    with socket.create_connection(("127.0.0.1", s3d.s3_port), timeout=30) as sock:
        sock.sendall(put_head(s3d, "/direct/cut", body) + body[: len(body) // 2])
    assert error_code(lambda: s3.head_object(Bucket="direct", Key="cut")) == "404"
    s3.put_object(Bucket="direct", Key="cut", Body=body[::-1])
    assert s3.get_object(Bucket="direct", Key="cut")["Body"].read() == body[::-1]
    # The bucket is deleted between the head and the rest of the body.
    s3.create_bucket(Bucket="gone")
    with socket.create_connection(("127.0.0.1", s3d.s3_port), timeout=30) as sock:
        sock.sendall(put_head(s3d, "/gone/k", body) + body[:4096])
        s3.delete_bucket(Bucket="gone")
        sock.sendall(body[4096:])
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 404 ") and b"<Code>NoSuchBucket</Code>" in reply
    s3.create_bucket(Bucket="gone")
    assert error_code(lambda: s3.head_object(Bucket="gone", Key="k")) == "404"
    assert s3.list_objects_v2(Bucket="gone")["KeyCount"] == 0
    # The Rust AWS SDK's PutObject (Dynamo KVBM's) names its operation in the query: its body
    # goes into G2 too, which takes the room before the last byte is in.
    free = lambda: s3d.metrics()["kvtier_memory_free_bytes"]  # noqa: E731
    before = free()
    with socket.create_connection(("127.0.0.1", s3d.s3_port), timeout=30) as sock:
        sock.sendall(put_head(s3d, "/direct/kvbm?x-id=PutObject", body) + body[:-1])
        wait_until(lambda: free() <= before - len(body), "G2 taking the body's room")
        sock.sendall(body[-1:])
        assert sock.recv(64).startswith(b"HTTP/1.1 200 OK\r\n")
    assert s3.get_object(Bucket="direct", Key="kvbm")["Body"].read() == body
    # An UploadPart of known length goes into the part's buffer the same way: one cut short adds
    # no part, one pipelined with a GET is added and completes the object.
    upload = s3.create_multipart_upload(Bucket="direct", Key="parts")["UploadId"]
    part = f"/direct/parts?partNumber=1&uploadId={upload}"
    with socket.create_connection(("127.0.0.1", s3d.s3_port), timeout=30) as sock:
        sock.sendall(put_head(s3d, part, body) + body[: len(body) // 2])
    assert "Parts" not in s3.list_parts(Bucket="direct", Key="parts", UploadId=upload)
    reply = raw(
        s3d,
        put_head(s3d, part, body) + body + get_request(s3d, get.split(f":{s3d.s3_port}", 1)[1]),
    )
    assert reply.count(b"HTTP/1.1 200 OK") == 2 and reply.endswith(body)
    etag = re.search(rb"ETag: (\S+)", reply, re.IGNORECASE)
    assert etag is not None
    s3.complete_multipart_upload(
        Bucket="direct",
        Key="parts",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag.group(1).decode()}]},
    )
    assert s3.get_object(Bucket="direct", Key="parts")["Body"].read() == body


def aws_chunked(payload: bytes, crc32: int) -> bytes:
    """`payload` in unsigned aws-chunked chunks of 64 KiB with a trailing CRC32 of `crc32`."""
    crc = base64.b64encode(crc32.to_bytes(4, "big")).decode()
    wire = b"".join(
        b"%x\r\n%b\r\n" % (len(payload[i : i + 65536]), payload[i : i + 65536])
        for i in range(0, len(payload), 65536)
    )
    return wire + f"0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n".encode()


def aws_chunked_put(
    d: Daemon, path: str, payload: bytes, http_chunk: int | None, *, wire: bytes | None = None
) -> bytes:
    """A PUT of `payload` as aws-sdk-cpp (NIXL's OBJ plugin) sends it over plain HTTP: unsigned
    aws-chunked chunks of 64 KiB and a trailing CRC32 (`wire`, when given, instead of them), in a
    chunked HTTP body of `http_chunk`-byte chunks (Content-Length when None), as its bytes."""
    if wire is None:
        wire = aws_chunked(payload, zlib.crc32(payload))
    extra = {
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(payload)),
        "x-amz-trailer": "x-amz-checksum-crc32",
    }
    url = f"http://127.0.0.1:{d.s3_port}{path}"
    request = AWSRequest(method="PUT", url=url, headers=extra)
    request.context["checksum"] = {"request_algorithm": {"in": "trailer"}}  # Signs it streaming.
    S3SigV4Auth(Credentials(*ACME), "s3", "us-east-1").add_auth(request)
    headers = {k: v for k, v in request.prepare().headers.items() if k != "Content-Length"}
    if http_chunk is None:
        headers["Content-Length"] = str(len(wire))
        body = wire
    else:
        headers["Transfer-Encoding"] = "chunked"
        body = b"".join(
            b"%x\r\n%b\r\n" % (len(wire[i : i + http_chunk]), wire[i : i + http_chunk])
            for i in range(0, len(wire), http_chunk)
        )
        body += b"0\r\n\r\n"
    head = f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{d.s3_port}\r\n".encode()
    return head + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n" + body


def test_aws_chunked_bodies_are_received_in_place_between_their_framing(s3d: Daemon) -> None:
    """NIXL's bodies (aws-chunked, a trailing checksum, in a chunked HTTP body) go into their G2
    allocation between the two framings, which are read through the input (docs/protocol.md):
    G2 takes the object's room before its last byte is in; every split of the framings (HTTP
    chunks of curl's 65,524 bytes, of 1,000, none) stores the same bytes; a request pipelined
    behind is answered; a wrong trailer, more bytes than declared, broken framing or a body cut
    short store nothing, and the daemon serves on."""
    s3 = client(s3d)
    s3.create_bucket(Bucket="framed")
    payload = os.urandom((1 << 20) + 12345)
    get = client(s3d, signature_version="s3v4").generate_presigned_url(
        "get_object", Params={"Bucket": "framed", "Key": "a"}
    )
    free = lambda: s3d.metrics()["kvtier_memory_free_bytes"]  # noqa: E731
    before = free()
    put = aws_chunked_put(s3d, "/framed/a", payload, 65524)
    with socket.create_connection(("127.0.0.1", s3d.s3_port), timeout=30) as sock:
        sock.sendall(put[:-100])
        wait_until(lambda: free() <= before - len(payload), "G2 taking the body's room")
        sock.sendall(put[-100:] + get_request(s3d, get.split(f":{s3d.s3_port}", 1)[1]))
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(1 << 20):
            reply += chunk
    assert reply.count(b"HTTP/1.1 200 OK") == 2 and reply.endswith(payload)
    for key, http_chunk in (("b", 1000), ("c", None)):
        reply = raw(s3d, aws_chunked_put(s3d, f"/framed/{key}", payload, http_chunk))
        assert reply.startswith(b"HTTP/1.1 200 OK"), reply[:300]
        assert s3.get_object(Bucket="framed", Key=key)["Body"].read() == payload
    # A wrong trailing checksum, a payload longer than declared, garbage after a chunk.
    wrong = aws_chunked(payload, zlib.crc32(payload) ^ 1)
    good = b"10000\r\n" + payload[:65536] + b"\r\n"
    longer = good * 17 + b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
    broken = good + b"10000\r\n" + payload[:65536] + b"XX" + good * 15
    for put, code in (
        (aws_chunked_put(s3d, "/framed/bad", payload, 65524, wire=wrong), b"BadDigest"),
        (aws_chunked_put(s3d, "/framed/bad", payload, 65524, wire=longer), b"IncompleteBody"),
        (aws_chunked_put(s3d, "/framed/bad", payload, 4096, wire=broken), b"IncompleteBody"),
    ):
        reply = raw(s3d, put)
        assert reply.startswith(b"HTTP/1.1 400") and code in reply, reply[:300]
        assert error_code(lambda: s3.head_object(Bucket="framed", Key="bad")) == "404"
    with socket.create_connection(("127.0.0.1", s3d.s3_port), timeout=30) as sock:
        put = aws_chunked_put(s3d, "/framed/cut", payload, 65524)
        sock.sendall(put[: len(put) // 2])
    assert error_code(lambda: s3.head_object(Bucket="framed", Key="cut")) == "404"
    assert s3.get_object(Bucket="framed", Key="a")["Body"].read() == payload


def test_large_bodies_received_in_place_leave_the_connection_awake(make_daemon: Any) -> None:
    """Each request on a connection is read as soon as it comes. The event loop wakes for a large
    body only once up to 1 MiB of it is in (SO_RCVLOWAT); a mark set for a body's first bytes
    outlived it when the loop's reads for one wake-up ended on the body's last byte, or with less
    than the mark to come: the next request waited a second for the mark's recovery
    (kvtier_low_water_stalls_total). Half of these connections of 16 MiB PUTs did before."""
    d = make_daemon(
        extra='[s3]\nlisten = "127.0.0.1:0"\n[store]\nmax_block_bytes = "20MiB"\n',
        memory="512MiB",
    )
    client(d).create_bucket(Bucket="large")
    body = os.urandom(16 << 20)
    for connection in range(8):
        with socket.create_connection(("127.0.0.1", d.s3_port), timeout=30) as sock:
            for request in range(3):
                sock.sendall(put_head(d, f"/large/{connection}-{request}", body) + body)
                reply = b""
                while not reply.endswith(b"\r\n\r\n"):  # A reply without a body.
                    reply += sock.recv(1)
                assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
    assert d.metrics()["kvtier_low_water_stalls_total"] == 0


def test_buckets_and_listings_outlive_a_restart(s3d: Daemon) -> None:
    s3 = client(s3d)
    s3.create_bucket(Bucket="durable")
    for name in ("a", "b", "dir/c"):
        s3.put_object(Bucket="durable", Key=name, Body=name.encode() * 100)
    s3.delete_object(Bucket="durable", Key="b")
    s3.put_object(Bucket="durable", Key="a", Body=b"A again")
    s3d.stop()
    s3d.start()  # G2's warm restart keeps the objects; the names journal their names.
    s3 = client(s3d)
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["durable"]

    def listed() -> list[tuple[str, int]]:
        objects = s3.list_objects_v2(Bucket="durable").get("Contents", [])
        return [(o["Key"], o["Size"]) for o in objects]

    assert listed() == [("a", 7), ("dir/c", 500)]
    assert s3.get_object(Bucket="durable", Key="a")["Body"].read() == b"A again"
    # A record cut short by a crash ends the journal there; what came before it is kept.
    s3.put_object(Bucket="durable", Key="d", Body=b"d")
    s3d.stop()
    with open(s3d.dir / "s3_names.log", "ab") as journal:
        journal.write(b"\x40\x00\x00\x00torn")
    s3d.start()
    s3 = client(s3d)
    assert listed() == [("a", 7), ("d", 1), ("dir/c", 500)]
    assert "damaged record" in (s3d.dir / "kvtierd.log").read_text()


def test_multipart_uploads(make_daemon: Any) -> None:
    d = make_daemon(extra='[s3]\nlisten = "127.0.0.1:0"\nmax_object_bytes = "24MiB"\n')
    s3 = client(d)
    s3.create_bucket(Bucket="big")
    data = os.urandom(12 << 20)
    config = boto3.s3.transfer.TransferConfig(
        multipart_threshold=5 << 20, multipart_chunksize=5 << 20
    )
    s3.upload_fileobj(io.BytesIO(data), "big", "model-state", Config=config)
    head = s3.head_object(Bucket="big", Key="model-state")
    assert head["ContentLength"] == len(data) and head["ETag"].endswith('-3"')
    assert s3.get_object(Bucket="big", Key="model-state")["Body"].read() == data
    # Completed under a name G2 holds, an upload replaces the object; the same parts again leave it.
    again = os.urandom(11 << 20)
    for _ in range(2):
        s3.upload_fileobj(io.BytesIO(again), "big", "model-state", Config=config)
        assert s3.get_object(Bucket="big", Key="model-state")["Body"].read() == again
    # An upload is invisible until it completes, and gone once aborted.
    upload = s3.create_multipart_upload(Bucket="big", Key="pending")["UploadId"]
    part = s3.upload_part(
        Bucket="big", Key="pending", UploadId=upload, PartNumber=1, Body=b"x" * 100
    )
    assert [
        p["PartNumber"]
        for p in s3.list_parts(Bucket="big", Key="pending", UploadId=upload)["Parts"]
    ] == [1]
    assert error_code(lambda: s3.head_object(Bucket="big", Key="pending")) == "404"
    # A part that is not the upload's, and parts out of order, leave the upload as it was.
    assert (
        error_code(
            lambda: s3.complete_multipart_upload(
                Bucket="big",
                Key="pending",
                UploadId=upload,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"0123"'}]},
            )
        )
        == "InvalidPart"
    )
    s3.complete_multipart_upload(
        Bucket="big",
        Key="pending",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    assert s3.get_object(Bucket="big", Key="pending")["Body"].read() == b"x" * 100
    aborted = s3.create_multipart_upload(Bucket="big", Key="aborted")["UploadId"]
    s3.upload_part(Bucket="big", Key="aborted", UploadId=aborted, PartNumber=1, Body=b"y")
    s3.abort_multipart_upload(Bucket="big", Key="aborted", UploadId=aborted)
    assert (
        error_code(lambda: s3.list_parts(Bucket="big", Key="aborted", UploadId=aborted))
        == "NoSuchUpload"
    )
    assert error_code(lambda: s3.head_object(Bucket="big", Key="aborted")) == "404"
    # Another tenant cannot touch an upload, even knowing its id.
    other = client(d, OTHER)
    other.create_bucket(Bucket="big")
    theirs = s3.create_multipart_upload(Bucket="big", Key="k")["UploadId"]
    assert (
        error_code(
            lambda: other.upload_part(
                Bucket="big", Key="k", UploadId=theirs, PartNumber=1, Body=b"z"
            )
        )
        == "NoSuchUpload"
    )


def test_a_lock_object_is_never_evicted_until_it_is_deleted(make_daemon: Any) -> None:
    d = make_daemon(
        extra='[s3]\nlisten = "127.0.0.1:0"\n[disk]\ndir = ""\n[store]\nmax_block_bytes = "4MiB"\n',
        memory="16MiB",
    )
    s3 = client(d)
    s3.create_bucket(Bucket="locks")
    s3.put_object(Bucket="locks", Key="leader", Body=b"node-1", IfNoneMatch="*")
    s3.put_object(Bucket="locks", Key="plain", Body=b"an ordinary object")
    blob = os.urandom(1 << 20)
    for i in range(48):  # Three times what G2 holds.
        s3.put_object(Bucket="locks", Key=f"fill/{i}", Body=blob + bytes([i]))
    assert error_code(lambda: s3.get_object(Bucket="locks", Key="plain")) == "NoSuchKey"
    assert s3.get_object(Bucket="locks", Key="leader")["Body"].read() == b"node-1"
    taken = lambda: s3.put_object(Bucket="locks", Key="leader", Body=b"node-2", IfNoneMatch="*")  # noqa: E731
    assert error_code(taken) == "PreconditionFailed"
    # Taken over as Dynamo KVBM takes a stale lock: If-Match on the ETag it read. One takeover
    # wins; the lock stays a lock (never evicted); another with the same ETag gets 412.
    etag = s3.head_object(Bucket="locks", Key="leader")["ETag"]
    s3.put_object(Bucket="locks", Key="leader", Body=b"node-3", IfMatch=etag)
    late = lambda: s3.put_object(Bucket="locks", Key="leader", Body=b"node-4", IfMatch=etag)  # noqa: E731
    assert error_code(late) == "PreconditionFailed"
    for i in range(48):
        s3.put_object(Bucket="locks", Key=f"fill/{i}", Body=blob + bytes([i, 1]))
    assert s3.get_object(Bucket="locks", Key="leader")["Body"].read() == b"node-3"
    s3.delete_object(Bucket="locks", Key="leader")
    taken()
    assert s3.get_object(Bucket="locks", Key="leader")["Body"].read() == b"node-2"


def test_s3_over_tls(make_daemon: Any, tmp_path: Any) -> None:
    cert, key = self_signed_cert(tmp_path)
    d = make_daemon(extra=S3 + f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\ns3 = true\n')
    s3 = client(d, cert=cert)
    s3.create_bucket(Bucket="sealed")
    data = os.urandom(3 << 20)
    s3.put_object(Bucket="sealed", Key="k", Body=data)  # Over TLS: unsigned payload, CRC32 trailer.
    assert s3.get_object(Bucket="sealed", Key="k")["Body"].read() == data
    # Without a checksum, the body as it is (Content-Length): decrypted straight into G2.
    client(d, cert=cert, request_checksum_calculation="when_required").put_object(
        Bucket="sealed", Key="direct", Body=data[::-1]
    )
    assert s3.get_object(Bucket="sealed", Key="direct")["Body"].read() == data[::-1]
    # A TLS listener refuses plaintext.
    assert not raw(d, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 200")


def test_a_lock_is_pinned_for_lock_seconds_then_unpinned(make_daemon: Any) -> None:
    d = make_daemon(extra=S3 + "lock_seconds = 1\n")
    s3 = client(d)
    s3.create_bucket(Bucket="locks")
    s3.put_object(Bucket="locks", Key="leader", Body=b"node-1", IfNoneMatch="*")
    pinned = [k for k in d.metrics() if k.startswith("kvtier_tenant_pinned_blocks{")]
    assert sum(d.metrics()[k] for k in pinned) == 1
    # The first S3 request after lock_seconds unpins it, even a PUT whose body goes straight
    # into G2; the object stays.
    block = os.urandom(128 << 10)
    names = (f"kv-{n}" for n in itertools.count())
    wait_until(
        lambda: (
            s3.put_object(Bucket="locks", Key=next(names), Body=block) is not None
            and sum(d.metrics()[k] for k in pinned) == 0
        ),
        "the lock unpinned",
    )
    assert s3.get_object(Bucket="locks", Key="leader")["Body"].read() == b"node-1"


def test_an_upload_trickled_in_times_out_stores_nothing_and_others_are_served(
    make_daemon: Any,
) -> None:
    """Slowloris: a byte every 20 ms keeps the connection from ever being idle; the request
    timeout (1 s here, plus a second per MiB received) ends it with S3's RequestTimeout."""
    d = make_daemon(extra='request_timeout_seconds = 1\nmin_request_rate = "1MiB"\n' + S3)
    s3 = client(d)
    s3.create_bucket(Bucket="slow")
    body = os.urandom(64 << 10)
    with socket.create_connection(("127.0.0.1", d.s3_port), timeout=30) as sock:
        sock.sendall(put_head(d, "/slow/k", body))
        sent = 0
        # The whole body would take over 20 minutes; the daemon gives up long before.
        while sent < len(body) - 1 and not select.select([sock], [], [], 0.02)[0]:
            sock.sendall(body[sent : sent + 1])
            sent += 1
            if sent == 8:  # Meanwhile, another client is served.
                s3.put_object(Bucket="slow", Key="other", Body=b"fine")
        assert sent < len(body) - 1, "the upload was never cut off"
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400 ") and b"<Code>RequestTimeout</Code>" in reply
    assert error_code(lambda: s3.head_object(Bucket="slow", Key="k")) == "404"
    assert s3.get_object(Bucket="slow", Key="other")["Body"].read() == b"fine"
    assert d.metrics()['kvtier_request_timeouts_total{protocol="s3"}'] == 1
