//! The Rust AWS SDK (aws-sdk-s3, as NVIDIA Dynamo KVBM's G4 object client uses it: a custom
//! endpoint, path-style addressing, static credentials, conditional creates and its lock
//! manager's protocol) against kvtierd's S3 endpoint. Usage: kvtier-rust-s3-client ENDPOINT ACCESS_KEY SECRET BUCKET. Prints one line
//! per check; exits 1 at the first that fails. Built and run by python/tests/test_s3_rust.py.

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;

fn check(ok: bool, what: &str) {
    if !ok {
        println!("FAILED: {what}");
        std::process::exit(1);
    }
    println!("ok: {what}");
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn get(s3: &Client, bucket: &str, key: &str, range: Option<&str>) -> Vec<u8> {
    let mut req = s3.get_object().bucket(bucket).key(key);
    if let Some(r) = range {
        req = req.range(r);
    }
    match req.send().await {
        Ok(out) => out
            .body
            .collect()
            .await
            .expect("reading a body")
            .into_bytes()
            .to_vec(),
        Err(e) => panic!("GET {key}: {:?}", e.code()),
    }
}

/// A plain PutObject of `body` (the SDK's default checksum); its error's code, if any.
async fn put(s3: &Client, bucket: &str, key: &str, body: Vec<u8>) -> Result<(), Option<String>> {
    match s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body))
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => Err(e.code().map(String::from)),
    }
}

/// A conditional PutObject (If-None-Match and/or If-Match); its error's code, if any.
async fn put_if(
    s3: &Client,
    bucket: &str,
    key: &str,
    body: Vec<u8>,
    if_none_match: Option<&str>,
    if_match: Option<&str>,
) -> Result<(), Option<String>> {
    let mut req = s3.put_object().bucket(bucket).key(key).body(ByteStream::from(body));
    if let Some(v) = if_none_match {
        req = req.if_none_match(v);
    }
    if let Some(v) = if_match {
        req = req.if_match(v);
    }
    match req.send().await {
        Ok(_) => Ok(()),
        Err(e) => Err(e.code().map(String::from)),
    }
}

/// The body of one of KVBM's lock objects: who holds it and until when (RFC 3339).
fn lock_body(instance: &str, deadline: &str) -> Vec<u8> {
    format!(
        r#"{{"instance_id":"{instance}","acquired_at":"2026-12-05T00:00:00Z","deadline":"{deadline}"}}"#
    )
    .into_bytes()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(
        args.len(),
        5,
        "usage: kvtier-rust-s3-client ENDPOINT ACCESS_KEY SECRET BUCKET"
    );
    let (endpoint, bucket) = (args[1].as_str(), args[4].as_str());
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new(
            &args[2],
            &args[3],
            None,
            None,
            "kvtier-test",
        ))
        .build();
    let s3 = Client::from_conf(config);

    check(
        s3.create_bucket().bucket(bucket).send().await.is_ok(),
        "CreateBucket",
    );
    check(
        s3.create_bucket().bucket(bucket).send().await.is_ok(),
        "CreateBucket again (its owner)",
    );
    check(
        s3.head_bucket().bucket(bucket).send().await.is_ok(),
        "HeadBucket",
    );

    // A block as KVBM writes one: a PUT with the SDK's default checksum (over plain HTTP: CRC32
    // in a header, Content-Length, `?x-id=PutObject`; kvtierd receives it straight into G2).
    let block = pattern(256 << 10, 7);
    let stored = put(&s3, bucket, "kvbm/blocks/0", block.clone()).await;
    check(stored.is_ok(), "PutObject of 256 KiB, default checksum");
    check(
        get(&s3, bucket, "kvbm/blocks/0", None).await == block,
        "GetObject: the same bytes",
    );
    check(
        get(&s3, bucket, "kvbm/blocks/0", Some("bytes=1000-1999")).await == block[1000..2000],
        "GetObject with a range",
    );
    let head = s3
        .head_object()
        .bucket(bucket)
        .key("kvbm/blocks/0")
        .send()
        .await;
    check(
        head.as_ref()
            .map(|h| h.content_length() == Some(block.len() as i64))
            .unwrap_or(false),
        "HeadObject: its length",
    );

    // The lock manager's conditional create: one winner, then 412 PreconditionFailed.
    let lock = |body: &'static [u8]| {
        s3.put_object()
            .bucket(bucket)
            .key("kvbm/locks/leader")
            .if_none_match("*")
            .body(ByteStream::from_static(body))
            .send()
    };
    check(
        lock(b"worker-1").await.is_ok(),
        "PutObject If-None-Match: * creates",
    );
    let second = lock(b"worker-2").await;
    check(
        second.as_ref().err().and_then(|e| e.code()) == Some("PreconditionFailed"),
        "PutObject If-None-Match: * on an existing key is PreconditionFailed",
    );
    check(
        second
            .err()
            .and_then(|e| e.raw_response().map(|r| r.status().as_u16()))
            == Some(412),
        "... with status 412",
    );
    check(
        get(&s3, bucket, "kvbm/locks/leader", None).await == b"worker-1",
        "the lock holds the first",
    );

    let listed = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix("kvbm/")
        .send()
        .await;
    let keys: Vec<String> = listed
        .map(|l| {
            l.contents()
                .iter()
                .filter_map(|o| o.key().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    check(
        keys == ["kvbm/blocks/0", "kvbm/locks/leader"],
        "ListObjectsV2 with a prefix",
    );

    check(
        s3.delete_object()
            .bucket(bucket)
            .key("kvbm/locks/leader")
            .send()
            .await
            .is_ok(),
        "DeleteObject: the lock released",
    );
    let gone = s3
        .head_object()
        .bucket(bucket)
        .key("kvbm/locks/leader")
        .send()
        .await;
    check(
        gone.err()
            .and_then(|e| e.into_service_error().is_not_found().then_some(()))
            .is_some(),
        "HeadObject after DeleteObject: NotFound",
    );
    check(
        lock(b"worker-3").await.is_ok(),
        "the lock taken again after its release",
    );

    // A larger object in one PUT (KVBM writes a layer's blocks whole), and one over the
    // endpoint's max_object_bytes (the test's 4 MiB): EntityTooLarge, nothing stored.
    let big = pattern(3 << 20, 3);
    let stored_big = put(&s3, bucket, "kvbm/blocks/big", big.clone()).await;
    check(stored_big.is_ok(), "PutObject of 3 MiB");
    check(
        get(&s3, bucket, "kvbm/blocks/big", None).await == big,
        "GetObject of 3 MiB: the same bytes",
    );
    let too_big = put(&s3, bucket, "kvbm/blocks/too-big", pattern(6 << 20, 5)).await;
    check(
        too_big.err().flatten().as_deref() == Some("EntityTooLarge"),
        "PutObject of 6 MiB: EntityTooLarge",
    );
    let absent = s3
        .head_object()
        .bucket(bucket)
        .key("kvbm/blocks/too-big")
        .send()
        .await;
    check(absent.is_err(), "... and nothing stored");

    // Dynamo KVBM's S3 lock manager, step by step as its code does it: `{hash}.lock` created
    // with If-None-Match: *, holding JSON with a deadline; a lock past its deadline taken over
    // with If-Match on the ETag the taker read; `{hash}.meta`, empty, marking the block stored
    // under `{rank}/{hash}`; the lock deleted on release.
    let hash = "5:abc123:def456";
    let (lock_key, meta_key) = (format!("{hash}.lock"), format!("{hash}.meta"));
    let holder = lock_body("instance-a", "2026-12-05T00:05:00Z");
    check(
        put_if(&s3, bucket, &lock_key, holder.clone(), Some("*"), None).await.is_ok(),
        "KVBM lock: taken with a conditional create",
    );
    let busy = put_if(&s3, bucket, &lock_key, lock_body("instance-b", "x"), Some("*"), None).await;
    check(
        busy.err().flatten().as_deref() == Some("PreconditionFailed"),
        "KVBM lock: another instance finds it held (412)",
    );
    let held = s3
        .get_object()
        .bucket(bucket)
        .key(&lock_key)
        .send()
        .await
        .expect("GET of the lock");
    let etag = held.e_tag().map(String::from).expect("the lock's ETag");
    let body = held.body.collect().await.expect("the lock's body").into_bytes();
    check(body.as_ref() == holder.as_slice(), "KVBM lock: its JSON read back with its ETag");
    let taker = lock_body("instance-b", "2026-12-05T00:10:00Z");
    check(
        put_if(&s3, bucket, &lock_key, taker.clone(), None, Some(&etag)).await.is_ok(),
        "KVBM lock: past its deadline, taken over with If-Match: its ETag",
    );
    let late = put_if(&s3, bucket, &lock_key, lock_body("instance-c", "y"), None, Some(&etag)).await;
    check(
        late.err().flatten().as_deref() == Some("PreconditionFailed"),
        "KVBM lock: a second takeover with the same ETag loses (412)",
    );
    check(
        get(&s3, bucket, &lock_key, None).await == taker,
        "KVBM lock: it holds the one takeover that won",
    );
    let vanished = put_if(&s3, bucket, "9:gone.lock", taker.clone(), None, Some(&etag)).await;
    check(
        vanished.err().flatten().as_deref() == Some("PreconditionFailed"),
        "KVBM lock: If-Match on a missing key is 412",
    );
    let block_key = format!("0/{hash}");
    check(
        put(&s3, bucket, &block_key, pattern(64 << 10, 9)).await.is_ok(),
        "KVBM block under {rank}/{hash}",
    );
    check(
        put(&s3, bucket, &meta_key, Vec::new()).await.is_ok(),
        "KVBM meta: an empty object",
    );
    let meta = s3.head_object().bucket(bucket).key(&meta_key).send().await;
    check(
        meta.map(|h| h.content_length() == Some(0)).unwrap_or(false),
        "KVBM meta: HeadObject finds it, 0 bytes",
    );
    for what in ["KVBM lock: released by DeleteObject", "... and deleting it again is fine"] {
        check(
            s3.delete_object()
                .bucket(bucket)
                .key(&lock_key)
                .send()
                .await
                .is_ok(),
            what,
        );
    }
    println!("all checks passed");
}
