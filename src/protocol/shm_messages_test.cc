#include "src/protocol/shm_messages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier::protocol {
namespace {

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

BlockKey Key(uint8_t n) {
  std::array<uint8_t, kBlockKeySize> b{};
  b[0] = n;
  return BlockKey(b);
}

TEST(ShmMessagesTest, OpcodesAreRequestsAndNamed) {
  for (uint8_t op = 0x20; op <= 0x27; ++op) {
    EXPECT_TRUE(IsShmOpcode(op));
    EXPECT_TRUE(IsRequestOpcode(op));
    EXPECT_NE(OpcodeName(op), "UNKNOWN");
  }
  EXPECT_FALSE(IsShmOpcode(0x28));
  EXPECT_FALSE(IsShmOpcode(static_cast<uint8_t>(Opcode::kGetMany)));
}

TEST(ShmMessagesTest, CheckExtents) {
  const uint64_t arena = 1 << 20;
  EXPECT_TRUE(CheckExtents(std::vector<ShmExtent>{{0, 10}, {100, 20}}, 30, arena).ok());
  EXPECT_TRUE(CheckExtents(std::vector<ShmExtent>{{arena - 1, 1}}, 1, arena).ok());
  // Outside, overflowing, empty, or not adding up to the block.
  EXPECT_FALSE(CheckExtents(std::vector<ShmExtent>{{arena, 1}}, 1, arena).ok());
  EXPECT_FALSE(CheckExtents(std::vector<ShmExtent>{{arena - 1, 2}}, 2, arena).ok());
  EXPECT_FALSE(CheckExtents(std::vector<ShmExtent>{{UINT64_MAX - 1, 4}}, 4, arena).ok());
  EXPECT_FALSE(CheckExtents(std::vector<ShmExtent>{{8, UINT64_MAX}}, 4, arena).ok());
  EXPECT_FALSE(CheckExtents(std::vector<ShmExtent>{{8, 0}, {0, 4}}, 4, arena).ok());
  EXPECT_FALSE(CheckExtents(std::vector<ShmExtent>{{0, 10}}, 11, arena).ok());
  EXPECT_FALSE(CheckExtents(std::vector<ShmExtent>{{0, 10}, {20, 10}}, 11, arena).ok());
  EXPECT_FALSE(CheckExtents({}, 1, arena).ok());
}

TEST(ShmMessagesTest, AttachRoundTrip) {
  std::string body;
  EncodeShmAttachReply({1 << 30, 4096, 4096, 1024}, &body);
  Result<ShmAttachReply> r = DecodeShmAttachReply(Bytes(body));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->arena_size, 1u << 30);
  EXPECT_EQ(r->page_bytes, 4096u);
  EXPECT_EQ(r->max_leases, 4096u);
  EXPECT_EQ(r->max_allocations, 1024u);
  EXPECT_FALSE(DecodeShmAttachReply(Bytes(body + "x")).ok());
  EXPECT_FALSE(DecodeShmAttachReply(Bytes(body.substr(0, body.size() - 1))).ok());
}

TEST(ShmMessagesTest, GetReplyRoundTripWithLeasesInlineAndErrors) {
  std::vector<ShmGetItem> items(3);
  items[0] = {Status::OK(), 7, 30, {{4096, 10}, {8192, 20}}};
  items[1] = {Status::NotFound("miss"), 0, 0, {}};
  items[2] = {Status::OK(), 0, 5, {}};
  std::string body;
  EncodeShmGetDirectory(items, &body);
  body += "hello";
  Result<ShmGetReply> r = DecodeShmGetReply(Bytes(body));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->items.size(), 3u);
  EXPECT_EQ(r->items[0].lease, 7u);
  EXPECT_EQ(r->items[0].extents, items[0].extents);
  EXPECT_EQ(r->items[1].status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(r->items[2].is_inline());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->inline_values[2].data()), 5), "hello");
  // Inline bytes must match exactly.
  EXPECT_FALSE(DecodeShmGetReply(Bytes(body + "!")).ok());
  EXPECT_FALSE(DecodeShmGetReply(Bytes(body.substr(0, body.size() - 1))).ok());
}

TEST(ShmMessagesTest, GetReplyRejectsLyingCounts) {
  std::string body;
  BodyWriter w(&body);
  w.StatusValue(Status::OK());
  w.U32(UINT32_MAX);  // Far more items than bytes.
  EXPECT_FALSE(DecodeShmGetReply(Bytes(body)).ok());
  body.clear();
  w.StatusValue(Status::OK());
  w.U32(1);
  w.StatusValue(Status::OK());
  w.U64(3);            // lease
  w.U64(10);           // size
  w.U32(UINT32_MAX);   // extent count
  EXPECT_FALSE(DecodeShmGetReply(Bytes(body)).ok());
}

TEST(ShmMessagesTest, AllocRequestAndReplyRoundTrip) {
  std::vector<PutEntry> entries = {{Key(1), Key(0), 100, 9, KvDtype::kFp16},
                                   {Key(2), std::nullopt, 200, 0, std::nullopt}};
  std::string body;
  EncodePutDirectory(entries, &body);
  Result<std::vector<PutEntry>> r = DecodeShmAllocRequest(Bytes(body), 16, 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].key, Key(1));
  EXPECT_EQ((*r)[0].parent, Key(0));
  EXPECT_EQ((*r)[0].session, 9u);
  EXPECT_EQ((*r)[0].dtype, KvDtype::kFp16);
  EXPECT_EQ((*r)[1].size, 200u);
  EXPECT_FALSE(DecodeShmAllocRequest(Bytes(body), 1, 1 << 20).ok());     // max_batch
  EXPECT_FALSE(DecodeShmAllocRequest(Bytes(body), 16, 150).ok());        // max_block_bytes
  EXPECT_FALSE(DecodeShmAllocRequest(Bytes(body + "x"), 16, 1 << 20).ok());  // trailing
  entries[0].size = 0;
  body.clear();
  EncodePutDirectory(entries, &body);
  EXPECT_FALSE(DecodeShmAllocRequest(Bytes(body), 16, 1 << 20).ok());    // empty value

  std::vector<ShmAllocItem> items = {{Status::OK(), 5, {{0, 100}}},
                                     {Status::AlreadyExists("present"), 0, {}}};
  body.clear();
  EncodeShmAllocReply(items, &body);
  Result<std::vector<ShmAllocItem>> reply = DecodeShmAllocReply(Bytes(body));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ((*reply)[0].allocation, 5u);
  EXPECT_EQ((*reply)[0].extents, items[0].extents);
  EXPECT_EQ((*reply)[1].status.code(), StatusCode::kAlreadyExists);
}

TEST(ShmMessagesTest, ReserveAndPutRoundTrip) {
  std::string body;
  EncodeShmReserveRequest(3 << 20, &body);
  EXPECT_EQ(*DecodeShmReserveRequest(Bytes(body)), 3u << 20);
  EXPECT_FALSE(DecodeShmReserveRequest(Bytes(body + "x")).ok());
  EXPECT_FALSE(DecodeShmReserveRequest(Bytes(body.substr(1))).ok());
  body.clear();
  EncodeShmReserveReply({7, 4096}, &body);
  Result<ShmReservation> reserved = DecodeShmReserveReply(Bytes(body));
  ASSERT_TRUE(reserved.ok()) << reserved.status().ToString();
  EXPECT_EQ(reserved->id, 7u);
  EXPECT_EQ(reserved->offset, 4096u);
  body.clear();
  EncodeShmReserveReply({0, 4096}, &body);
  EXPECT_FALSE(DecodeShmReserveReply(Bytes(body)).ok());  // Id 0 is no reservation.

  std::vector<PutEntry> entries = {{Key(1), Key(0), 100, 9, KvDtype::kFp16},
                                   {Key(2), std::nullopt, 200, 0, std::nullopt}};
  const std::vector<uint64_t> offsets = {8192, 8292};
  body.clear();
  EncodeShmPutRequest(entries, offsets, &body);
  Result<std::vector<ShmPutItem>> items = DecodeShmPutRequest(Bytes(body), 16, 1 << 20);
  ASSERT_TRUE(items.ok()) << items.status().ToString();
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].entry.parent, Key(0));
  EXPECT_EQ((*items)[0].entry.dtype, KvDtype::kFp16);
  EXPECT_EQ((*items)[0].offset, 8192u);
  EXPECT_EQ((*items)[1].entry.size, 200u);
  EXPECT_EQ((*items)[1].offset, 8292u);
  EXPECT_FALSE(DecodeShmPutRequest(Bytes(body), 1, 1 << 20).ok());          // max_batch
  EXPECT_FALSE(DecodeShmPutRequest(Bytes(body + "x"), 16, 1 << 20).ok());   // trailing
  EXPECT_FALSE(DecodeShmPutRequest(Bytes(body.substr(0, body.size() - 8)), 16, 1 << 20).ok());
}

TEST(ShmMessagesTest, IdLists) {
  std::vector<uint64_t> ids = {1, 2, UINT64_MAX};
  std::string body;
  EncodeShmIds(ids, &body);
  Result<std::vector<uint64_t>> r = DecodeShmIds(Bytes(body), 8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, ids);
  EXPECT_FALSE(DecodeShmIds(Bytes(body), 2).ok());
  EXPECT_FALSE(DecodeShmIds(Bytes(body + "x"), 8).ok());
  EXPECT_FALSE(DecodeShmIds(Bytes(body.substr(0, 11)), 8).ok());
}

}  // namespace
}  // namespace kvtier::protocol
