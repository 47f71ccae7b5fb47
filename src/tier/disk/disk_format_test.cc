// The on-disk format's encoder and decoder: round trips, and every kind of damage is an error.

#include "src/tier/disk/disk_format.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::disk {
namespace {

BlockKey TestKey() {
  std::array<uint8_t, kBlockKeySize> b{};
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 3 + 1);
  return BlockKey(b);
}

RecordHeader TestHeader() {
  RecordHeader h;
  h.key = TestKey();
  h.tenant = "tenant-a";
  h.sequence = 42;
  h.timestamp_us = 1234567;
  h.value_bytes = 5000;
  h.stored_bytes = 3100;
  h.payload_checksum = 0xfeedface;
  h.flags = kFlagEncrypted;
  h.codec = 1;
  h.key_version = 3;
  for (size_t i = 0; i < h.nonce.size(); ++i) h.nonce[i] = static_cast<uint8_t>(0xa0 + i);
  for (size_t i = 0; i < h.tag.size(); ++i) h.tag[i] = static_cast<uint8_t>(0xc0 + i);
  h.dtype = static_cast<uint8_t>(KvDtype::kBf16);
  h.session = 0x1122334455667788ULL;
  h.created_us = 1200000;
  return h;
}

TEST(DiskFormatTest, RecordHeaderRoundTrips) {
  RecordHeader h = TestHeader();
  std::vector<std::byte> buf(kPageBytes);
  EncodeRecordHeader(h, buf);
  size_t header_bytes = 0;
  Result<RecordHeader> d = DecodeRecordHeader(buf, &header_bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(header_bytes, RecordHeaderBytes(h.tenant.size()));
  EXPECT_EQ(header_bytes % 8, 0u);
  EXPECT_EQ(d->key, h.key);
  EXPECT_EQ(d->tenant, h.tenant);
  EXPECT_EQ(d->sequence, 42u);
  EXPECT_EQ(d->value_bytes, 5000u);
  EXPECT_EQ(d->stored_bytes, 3100u);
  EXPECT_EQ(d->payload_checksum, 0xfeedfaceu);
  EXPECT_EQ(d->flags, kFlagEncrypted);
  EXPECT_EQ(d->codec, 1u);
  EXPECT_EQ(d->key_version, 3u);
  EXPECT_EQ(d->nonce, h.nonce);
  EXPECT_EQ(d->tag, h.tag);
  EXPECT_EQ(d->dtype, h.dtype);
  EXPECT_EQ(d->session, h.session);
  EXPECT_EQ(d->created_us, h.created_us);
  EXPECT_EQ(RecordBytes(h.tenant.size(), 5000) % kPageBytes, 0u);
}

TEST(DiskFormatTest, SessionTombstoneRoundTrips) {
  RecordHeader h;
  h.kind = RecordKind::kEraseSession;
  h.tenant = "t";
  h.session = 77;
  h.sequence = 9;
  std::vector<std::byte> buf(kPageBytes);
  EncodeRecordHeader(h, buf);
  size_t header_bytes = 0;
  Result<RecordHeader> d = DecodeRecordHeader(buf, &header_bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->kind, RecordKind::kEraseSession);
  EXPECT_EQ(d->session, 77u);
  h.session = 0;  // A session tombstone must name a session.
  EncodeRecordHeader(h, buf);
  EXPECT_EQ(DecodeRecordHeader(buf, &header_bytes).status().code(), StatusCode::kDataLoss);
}

TEST(DiskFormatTest, EveryFlippedBitOfARecordHeaderIsDetected) {
  RecordHeader h = TestHeader();
  std::vector<std::byte> buf(kPageBytes);
  EncodeRecordHeader(h, buf);
  const size_t n = RecordHeaderBytes(h.tenant.size());
  for (size_t bit = 0; bit < n * 8; ++bit) {
    std::vector<std::byte> copy = buf;
    copy[bit / 8] ^= std::byte(1u << (bit % 8));
    size_t header_bytes = 0;
    EXPECT_EQ(DecodeRecordHeader(copy, &header_bytes).status().code(), StatusCode::kDataLoss)
        << "bit " << bit;
  }
}

TEST(DiskFormatTest, TruncatedOrUnsupportedRecordHeadersAreErrors) {
  RecordHeader h = TestHeader();
  std::vector<std::byte> buf(kPageBytes);
  EncodeRecordHeader(h, buf);
  size_t header_bytes = 0;
  for (size_t len = 0; len < RecordHeaderBytes(h.tenant.size()); ++len) {
    EXPECT_FALSE(DecodeRecordHeader(std::span(buf).first(len), &header_bytes).ok()) << len;
  }
  // Well-checksummed headers whose fields are not valid for this version.
  auto rejected = [&](const RecordHeader& bad) {
    EncodeRecordHeader(bad, buf);
    return DecodeRecordHeader(buf, &header_bytes).status().code() == StatusCode::kDataLoss;
  };
  RecordHeader bad = h;
  bad.flags = 0x02;  // An unknown flag.
  EXPECT_TRUE(rejected(bad));
  bad = h;
  bad.dtype = 6;  // An unknown dtype.
  EXPECT_TRUE(rejected(bad));
  bad = h;
  bad.codec = kCodecNone;  // A raw payload must be as long as the value.
  EXPECT_TRUE(rejected(bad));
  bad = h;
  bad.flags = 0;  // Only a sealed record names a key version.
  EXPECT_TRUE(rejected(bad));
  bad = h;
  bad.kind = RecordKind::kEraseKey;  // A tombstone carries no payload.
  EXPECT_TRUE(rejected(bad));
  // An unknown codec id is not the format's to judge: BlockCodec::Decode rejects it on read.
  RecordHeader future = h;
  future.codec = 9;
  EncodeRecordHeader(future, buf);
  EXPECT_TRUE(DecodeRecordHeader(buf, &header_bytes).ok());
}

TEST(DiskFormatTest, SegmentHeaderRoundTripsAndRejectsOtherVersions) {
  std::vector<std::byte> buf(kSegmentHeaderBytes);
  EncodeSegmentHeader(SegmentHeader{7, 99}, buf);
  Result<SegmentHeader> h = DecodeSegmentHeader(buf);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->segment_id, 7u);
  EXPECT_EQ(static_cast<uint8_t>(buf[4]), kFormatVersion);
  buf[4] = std::byte{3};
  EXPECT_EQ(DecodeSegmentHeader(buf).status().code(), StatusCode::kFailedPrecondition);
  buf[4] = std::byte{1};  // Version 1 is refused, not migrated.
  Status v1 = DecodeSegmentHeader(buf).status();
  EXPECT_EQ(v1.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(v1.message().find("version 1"), std::string_view::npos) << v1.ToString();
  EXPECT_NE(v1.message().find("version 2"), std::string_view::npos) << v1.ToString();
  buf[4] = std::byte{2};
  buf[10] ^= std::byte{1};
  EXPECT_EQ(DecodeSegmentHeader(buf).status().code(), StatusCode::kDataLoss);
  buf[0] = std::byte{0};
  EXPECT_EQ(DecodeSegmentHeader(buf).status().code(), StatusCode::kDataLoss);
}

TEST(DiskFormatTest, FooterRoundTripsAndDetectsDamage) {
  Footer f;
  f.tenants = {"a", "bb"};
  for (uint32_t i = 0; i < 100; ++i) {
    const RecordKind kind = i % 7 == 0   ? RecordKind::kEraseKey
                            : i % 11 == 0 ? RecordKind::kEraseSession
                                          : RecordKind::kBlock;
    f.entries.push_back(FooterEntry{kind, static_cast<uint16_t>(i % 2), TestKey(), 1 + 2 * i, 2,
                                    10000 + i, 1000 + i, 5, 3000 + i,
                                    static_cast<uint8_t>(i % 6), 500 + i, 7000 + i});
  }
  const uint64_t footer_offset = (1 + 2 * 100) * kPageBytes;
  AlignedBuffer buf = EncodeFooter(f, 3, footer_offset);
  ASSERT_EQ(buf.size() % kPageBytes, 0u);
  Result<Trailer> t = DecodeTrailer(buf.span().last(kTrailerBytes));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->segment_id, 3u);
  EXPECT_EQ(t->footer_offset, footer_offset);
  Result<Footer> d = DecodeFooter(buf.span().first(buf.size() - kTrailerBytes), *t);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tenants, f.tenants);
  ASSERT_EQ(d->entries.size(), 100u);
  EXPECT_EQ(d->entries[99].sequence, 1099u);
  EXPECT_EQ(d->entries[99].value_bytes, 10099u);
  EXPECT_EQ(d->entries[99].stored_bytes, 3099u);
  EXPECT_EQ(d->entries[99].dtype, 99 % 6);
  EXPECT_EQ(d->entries[99].session, 599u);
  EXPECT_EQ(d->entries[99].created_us, 7099u);
  EXPECT_EQ(d->entries[7].kind, RecordKind::kEraseKey);
  EXPECT_EQ(d->entries[11].kind, RecordKind::kEraseSession);

  std::span<std::byte> body = buf.span().first(buf.size() - kTrailerBytes);
  body[100] ^= std::byte{1};
  EXPECT_EQ(DecodeFooter(body, *t).status().code(), StatusCode::kDataLoss);
  body[100] ^= std::byte{1};
  Trailer shrunk = *t;
  shrunk.footer_offset = 10 * kPageBytes;  // Entries would lie past the footer.
  EXPECT_EQ(DecodeFooter(body, shrunk).status().code(), StatusCode::kDataLoss);
  std::span<std::byte> trailer = buf.span().last(kTrailerBytes);
  trailer[20] ^= std::byte{1};
  EXPECT_EQ(DecodeTrailer(trailer).status().code(), StatusCode::kDataLoss);
}

TEST(DiskFormatTest, RandomBytesNeverDecodeNorCrash) {
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  std::vector<std::byte> buf(kPageBytes);
  for (int i = 0; i < 2000; ++i) {
    for (std::byte& b : buf) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      b = std::byte(static_cast<uint8_t>(x));
    }
    // Give the decoders a real magic now and then so they get past the first check.
    if (i % 2 == 0) std::memcpy(buf.data(), &kRecordMagic, 4);
    size_t header_bytes = 0;
    EXPECT_FALSE(DecodeRecordHeader(buf, &header_bytes).ok());
    EXPECT_FALSE(DecodeSegmentHeader(buf).ok());
    EXPECT_FALSE(DecodeTrailer(buf).ok());
  }
}

}  // namespace
}  // namespace kvtier::disk
