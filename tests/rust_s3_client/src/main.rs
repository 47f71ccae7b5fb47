//! The Rust AWS SDK (aws-sdk-s3, as NVIDIA Dynamo KVBM's G4 object client uses it: a custom
//! endpoint, path-style addressing, static credentials, conditional creates) against kvtierd's
//! S3 endpoint. Usage: kvtier-rust-s3-client ENDPOINT ACCESS_KEY SECRET BUCKET. Prints one line
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

    // A block as KVBM writes one: a PUT with the SDK's default checksum (CRC32, in an
    // aws-chunked body with a trailer).
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
    println!("all checks passed");
}
