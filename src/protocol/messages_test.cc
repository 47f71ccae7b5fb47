#include "src/protocol/messages.h"

#include <string>

#include <gtest/gtest.h>

namespace kvtier::protocol {
namespace {

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

BlockKey Key(uint8_t fill) {
  std::array<uint8_t, kBlockKeySize> b;
  b.fill(fill);
  return BlockKey(b);
}

TEST(MessagesTest, HelloRoundTrip) {
  HelloRequest in{1, kFeaturePrefetch, "acme", "secret", "test"};
  std::string body;
  EncodeHello(in, &body);
  Result<HelloRequest> out = DecodeHelloRequest(Bytes(body));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->tenant, "acme");
  EXPECT_EQ(out->token, "secret");
  EXPECT_EQ(out->features, kFeaturePrefetch);
  body.push_back('x');
  EXPECT_FALSE(DecodeHelloRequest(Bytes(body)).ok());  // Trailing bytes are malformed.
}

TEST(MessagesTest, KeyListRejectsLyingCountsAndOversizedBatches) {
  std::vector<BlockKey> keys = {Key(1), Key(2), Key(3)};
  std::string body;
  EncodeKeyList(keys, &body);
  Result<std::vector<BlockKey>> out = DecodeKeyList(Bytes(body), 16);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, keys);
  EXPECT_EQ(DecodeKeyList(Bytes(body), 2).status().code(), StatusCode::kInvalidArgument);
  body[0] = 4;  // Claims one key more than the body holds.
  EXPECT_EQ(DecodeKeyList(Bytes(body), 16).status().code(), StatusCode::kInvalidArgument);
  body[0] = '\xff';
  body[3] = '\x7f';  // Claims two billion keys.
  EXPECT_FALSE(DecodeKeyList(Bytes(body), UINT32_MAX).ok());
}

TEST(MessagesTest, PutManyRoundTripWithParents) {
  std::string v1 = "first value", v2 = "second";
  std::vector<PutEntry> entries = {{Key(1), std::nullopt, v1.size(), 0, std::nullopt},
                                   {Key(2), Key(1), v2.size(), 0, std::nullopt}};
  std::string body;
  EncodePutDirectory(entries, &body);
  body += v1 + v2;
  Result<std::vector<BlockWrite>> w = DecodePutMany(Bytes(body), 16, 1 << 20);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->size(), 2u);
  EXPECT_FALSE((*w)[0].parent.has_value());
  EXPECT_EQ((*w)[1].parent, Key(1));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*w)[1].value.data()), (*w)[1].value.size()), v2);
}

TEST(MessagesTest, PutManyCarriesEngineHashesAndRejectsBadOnes) {
  EngineHash integer;
  integer.integer = true;
  integer.size = 8;
  integer.bytes[7] = 42;
  EngineHash bytes;
  bytes.size = 3;
  bytes.bytes[0] = 'a';
  std::vector<PutEntry> entries = {{Key(1), std::nullopt, 1, 0, std::nullopt, integer},
                                   {Key(2), Key(1), 1, 0, std::nullopt, bytes},
                                   {Key(3), Key(2), 1, 0, std::nullopt}};
  std::string body;
  EncodePutDirectory(entries, &body);
  body += "xyz";
  Result<std::vector<BlockWrite>> w = DecodePutMany(Bytes(body), 16, 1 << 20);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)[0].engine_hash, integer);
  EXPECT_EQ((*w)[1].engine_hash, bytes);
  EXPECT_FALSE((*w)[2].engine_hash.has_value());
  for (uint8_t n : {uint8_t{0}, uint8_t{33}, uint8_t{0x80 | 9}}) {
    std::string bad;
    EncodePutDirectory(std::vector<PutEntry>{{Key(1), std::nullopt, 1, 0, std::nullopt, integer}},
                       &bad);
    bad[4 + kBlockKeySize + 1] = static_cast<char>(n);  // The engine hash's length byte.
    bad += "x";
    EXPECT_EQ(DecodePutMany(Bytes(bad), 16, 1 << 20).status().code(), StatusCode::kInvalidArgument)
        << int{n};
  }
}

TEST(MessagesTest, PutManyRejectsSizesThatDoNotAddUp) {
  std::vector<PutEntry> entries = {{Key(1), std::nullopt, 100, 0, std::nullopt}};
  std::string body;
  EncodePutDirectory(entries, &body);
  body += "short";
  EXPECT_EQ(DecodePutMany(Bytes(body), 16, 1 << 20).status().code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, PutManyHeadIsTheDirectoryBeforeItsValuesArrive) {
  EngineHash hash;
  hash.size = 32;
  std::vector<PutEntry> entries = {{Key(1), std::nullopt, 300, 7, KvDtype::kBf16, hash},
                                   {Key(2), Key(1), 200, 0, std::nullopt}};
  std::string directory;
  EncodePutDirectory(entries, &directory);
  EXPECT_LE(directory.size(), 4 + entries.size() * kMaxPutEntryBytes);
  const size_t body_length = directory.size() + 500;
  // The directory and the first few value bytes: the values' sizes are checked against the
  // body's length, not against the bytes at hand.
  const std::string head = directory + "abc";
  Result<PutManyHead> h = DecodePutManyHead(Bytes(head), body_length, 16, 1 << 20);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->directory_bytes, directory.size());
  ASSERT_EQ(h->entries.size(), 2u);
  EXPECT_EQ(h->entries[0].session, 7u);
  EXPECT_EQ(h->entries[1].parent, Key(1));
  EXPECT_EQ(DecodePutManyHead(Bytes(head), body_length + 1, 16, 1 << 20).status().code(),
            StatusCode::kInvalidArgument);
  // A directory cut short is malformed.
  EXPECT_EQ(DecodePutManyHead(Bytes(directory.substr(0, directory.size() - 1)), body_length, 16,
                              1 << 20)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(MessagesTest, PutManyRejectsOversizedAndEmptyValues) {
  std::string body;
  EncodePutDirectory(std::vector<PutEntry>{{Key(1), std::nullopt, 10, 0, std::nullopt}}, &body);
  body += "0123456789";
  Result<std::vector<BlockWrite>> w = DecodePutMany(Bytes(body), 16, 9);
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("max_block_bytes"), std::string_view::npos);
  std::string empty;
  EncodePutDirectory(std::vector<PutEntry>{{Key(1), std::nullopt, 0, 0, std::nullopt}}, &empty);
  EXPECT_FALSE(DecodePutMany(Bytes(empty), 16, 9).ok());
}

TEST(MessagesTest, DeleteByKeysAndRetiredScopes) {
  DeleteRequest keys{DeleteScope::kKeys, {Key(1), Key(2)}};
  std::string body;
  EncodeDelete(keys, &body);
  Result<DeleteRequest> out = DecodeDeleteRequest(Bytes(body), 8);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->keys, keys.keys);
  // Scopes 1 (session) and 2 (tenant) moved to their own opcodes; the error says where.
  std::string session_scope = "\x01";
  Result<DeleteRequest> retired = DecodeDeleteRequest(Bytes(session_scope), 8);
  EXPECT_EQ(retired.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(retired.status().message().find("DELETE_SESSION"), std::string_view::npos);
  std::string bad = "\x09";
  EXPECT_FALSE(DecodeDeleteRequest(Bytes(bad), 8).ok());
}

TEST(MessagesTest, DeleteSessionAndDeletionReportRoundTrip) {
  std::string body;
  EncodeDeleteSession(0x1122334455667788ull, &body);
  EXPECT_EQ(body.size(), 8u);
  Result<SessionId> session = DecodeDeleteSessionRequest(Bytes(body));
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(*session, 0x1122334455667788ull);
  std::string zero;
  EncodeDeleteSession(0, &zero);
  EXPECT_EQ(DecodeDeleteSessionRequest(Bytes(zero)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(DecodeDeleteSessionRequest(Bytes(body.substr(0, 7))).ok());

  // With kFeatureSharedReport the G4 count follows; without it, the original encoding, which
  // a new client still reads (as 0 removed from G4).
  for (const bool with_shared : {true, false}) {
    std::string reply;
    EncodeDeletionReport(DeletionReport{7, 3, 5}, with_shared, &reply);
    Result<DeletionReport> report = DecodeDeletionReport(Bytes(reply));
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->memory_blocks, 7u);
    EXPECT_EQ(report->disk_blocks, 3u);
    EXPECT_EQ(report->shared_blocks, with_shared ? 5u : 0u);
    EXPECT_FALSE(DecodeDeletionReport(Bytes(reply + "1234")).ok()) << "trailing bytes";
  }
  std::string error;
  EncodeStatusOnly(Status::Unimplemented("not yet"), &error);
  EXPECT_EQ(DecodeDeletionReport(Bytes(error)).status().code(), StatusCode::kUnimplemented);
}

TEST(MessagesTest, HintSessionRoundTripAndBadBodies) {
  HintSessionRequest req{77, {}};
  req.hint.retain_seconds = 45;
  req.hint.priority = Store::SessionPriority::kHigh;
  std::string body;
  EncodeHintSession(req, &body);
  EXPECT_EQ(body.size(), 14u);
  Result<HintSessionRequest> got = DecodeHintSessionRequest(Bytes(body));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->session, 77u);
  EXPECT_EQ(got->hint.retain_seconds, 45u);
  EXPECT_FALSE(got->hint.finished);
  EXPECT_EQ(got->hint.priority, Store::SessionPriority::kHigh);
  // Without a priority, none is decoded (not kNormal: "unchanged").
  HintSessionRequest finished{78, {}};
  finished.hint.finished = true;
  std::string fin;
  EncodeHintSession(finished, &fin);
  got = DecodeHintSessionRequest(Bytes(fin));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->hint.finished);
  EXPECT_FALSE(got->hint.priority.has_value());

  std::string bad = body;
  bad[12] = '\x04';  // An unknown flag.
  EXPECT_EQ(DecodeHintSessionRequest(Bytes(bad)).status().code(), StatusCode::kInvalidArgument);
  bad = body;
  bad[13] = '\x03';  // No such priority.
  EXPECT_EQ(DecodeHintSessionRequest(Bytes(bad)).status().code(), StatusCode::kInvalidArgument);
  bad = fin;
  bad[13] = '\x02';  // A priority byte without its flag.
  EXPECT_EQ(DecodeHintSessionRequest(Bytes(bad)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(DecodeHintSessionRequest(Bytes(body.substr(0, 13))).ok());
  EXPECT_FALSE(DecodeHintSessionRequest(Bytes(body + "x")).ok());
  HintSessionRequest zero{0, req.hint};
  std::string z;
  EncodeHintSession(zero, &z);
  EXPECT_EQ(DecodeHintSessionRequest(Bytes(z)).status().code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, PutManyCarriesSessionAndDtype) {
  std::string v1 = "abc", v2 = "defg";
  std::vector<PutEntry> entries = {{Key(1), std::nullopt, v1.size(), 42, KvDtype::kBf16},
                                   {Key(2), Key(1), v2.size(), 0, KvDtype::kFp8E4M3},
                                   {Key(3), Key(2), v1.size(), 43, std::nullopt}};
  std::string body;
  EncodePutDirectory(entries, &body);
  body += v1 + v2 + v1;
  Result<std::vector<BlockWrite>> w = DecodePutMany(Bytes(body), 16, 1 << 20);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->size(), 3u);
  EXPECT_EQ((*w)[0].session, 42u);
  EXPECT_EQ((*w)[0].dtype, KvDtype::kBf16);
  EXPECT_FALSE((*w)[0].parent.has_value());
  EXPECT_EQ((*w)[1].session, 0u);
  EXPECT_EQ((*w)[1].dtype, KvDtype::kFp8E4M3);
  EXPECT_EQ((*w)[1].parent, Key(1));
  EXPECT_EQ((*w)[2].session, 43u);
  EXPECT_FALSE((*w)[2].dtype.has_value());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*w)[1].value.data()), (*w)[1].value.size()), v2);

  // Without session and dtype the entry is the original encoding: flags 0 or 1 only.
  std::string plain;
  EncodePutDirectory(std::vector<PutEntry>{{Key(1), std::nullopt, 3, 0, std::nullopt}}, &plain);
  EXPECT_EQ(plain.size(), 4u + 32 + 1 + 8);
  EXPECT_EQ(plain[4 + 32], 0);

  // A dtype byte outside the enum is rejected by name.
  std::string bad_dtype;
  EncodePutDirectory(std::vector<PutEntry>{{Key(1), std::nullopt, 3, 0, KvDtype::kBf16}}, &bad_dtype);
  bad_dtype[4 + 32 + 1] = 9;
  bad_dtype += "abc";
  Result<std::vector<BlockWrite>> rejected = DecodePutMany(Bytes(bad_dtype), 16, 1 << 20);
  EXPECT_EQ(rejected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("dtype"), std::string_view::npos);
}

TEST(MessagesTest, ItemStatusesAndErrorsRoundTrip) {
  std::vector<Status> in = {Status::OK(), Status::NotFound("gone"), Status::ResourceExhausted("full")};
  std::string body;
  EncodeItemStatuses(in, &body);
  Result<std::vector<Status>> out = DecodeItemStatuses(Bytes(body));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, in);
  std::string err;
  EncodeStatusOnly(Status::Unauthenticated("who are you"), &err);
  EXPECT_EQ(DecodeItemStatuses(Bytes(err)).status(), Status::Unauthenticated("who are you"));
}

TEST(MessagesTest, GetManyDecodeGivesViewsOfEachValue) {
  std::vector<std::byte> a(5, std::byte{'a'});
  std::vector<Result<BlockHandle>> items;
  items.emplace_back(BlockHandle(a));
  items.emplace_back(Status::NotFound("miss"));
  std::string body;
  EncodeGetDirectory(items, &body);
  body += "aaaaa";
  auto out = DecodeGetMany(Bytes(body));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 2u);
  ASSERT_TRUE((*out)[0].ok());
  EXPECT_EQ((*out)[0]->size(), 5u);
  EXPECT_EQ((*out)[1].status().code(), StatusCode::kNotFound);
  body.pop_back();  // One value byte missing.
  EXPECT_FALSE(DecodeGetMany(Bytes(body)).ok());
}

TEST(MessagesTest, PrefixMatchExistsAndStats) {
  PrefixMatch m{2, {TierLevel::kG2, TierLevel::kG3}};
  std::string body;
  EncodePrefixMatch(m, &body);
  Result<PrefixMatch> pm = DecodePrefixMatch(Bytes(body));
  ASSERT_TRUE(pm.ok());
  EXPECT_EQ(pm->tiers, m.tiers);

  std::string ex;
  std::vector<uint8_t> tiers = {2, 0, 3};
  EncodeExists(tiers, &ex);
  EXPECT_EQ(*DecodeExists(Bytes(ex)), tiers);

  std::string st;
  std::vector<NamedCounter> counters = {{"hits", 3}, {"misses", 4}};
  EncodeStats("acme", counters, &st);
  Result<StatsReply> r = DecodeStats(Bytes(st));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tenant, "acme");
  ASSERT_EQ(r->counters.size(), 2u);
  EXPECT_EQ(r->counters[1].value, 4u);
}

TEST(MessagesTest, PutEntriesCarryTheirRoleAndRejectUnknownOnes) {
  std::vector<PutEntry> entries = {{Key(1), std::nullopt, 2, 0, std::nullopt, std::nullopt},
                                   {Key(2), Key(1), 2, 0, std::nullopt, std::nullopt,
                                    BlockRole::kKvNeedsState},
                                   {Key(3), Key(2), 2, 0, std::nullopt, std::nullopt,
                                    BlockRole::kState}};
  std::string body;
  EncodePutDirectory(entries, &body);
  body += "aabbcc";
  Result<std::vector<BlockWrite>> out = DecodePutMany(Bytes(body), 16, 1024);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].role, BlockRole::kKv);
  EXPECT_EQ((*out)[1].role, BlockRole::kKvNeedsState);
  EXPECT_EQ((*out)[2].role, BlockRole::kState);
  // The role byte of the third entry (key, flags, parent, role, size) set to 3.
  const size_t role_at = 4 + (32 + 1 + 8) + (32 + 1 + 32 + 1 + 8) + (32 + 1 + 32);
  ASSERT_EQ(body[role_at], 2);
  body[role_at] = 3;
  EXPECT_EQ(DecodePutMany(Bytes(body), 16, 1024).status().code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, ResumeRequestAndMatchRoundTrip) {
  ResumeRequest in{{2, {{"mamba", 1}, {"indexer", 0}}, true}, {Key(1), Key(2)}};
  std::string body;
  EncodeResumeRequest(in, &body);
  Result<ResumeRequest> out = DecodeResumeRequest(Bytes(body), 16);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->query.keys_per_block, 2u);
  EXPECT_TRUE(out->query.all_lengths);
  ASSERT_EQ(out->query.groups.size(), 2u);
  EXPECT_EQ(out->query.groups[1].name, "indexer");
  EXPECT_EQ(out->query.groups[1].window_blocks, 0u);
  EXPECT_EQ(out->keys, in.keys);
  EXPECT_FALSE(DecodeResumeRequest(Bytes(body.substr(0, body.size() - 1)), 16).ok());
  std::string flagged = body;
  flagged[4] = 2;  // An unknown flag.
  EXPECT_EQ(DecodeResumeRequest(Bytes(flagged), 16).status().code(),
            StatusCode::kInvalidArgument);
  std::string many = body;
  many[5] = static_cast<char>(kMaxStateGroups + 1);
  EXPECT_EQ(DecodeResumeRequest(Bytes(many), 16).status().code(), StatusCode::kInvalidArgument);

  ResumeMatch m{3, 2, {TierLevel::kG2, TierLevel::kG3, TierLevel::kG4}, {1, 2}, {3, 2}};
  std::string reply;
  EncodeResumeMatch(m, &reply);
  Result<ResumeMatch> back = DecodeResumeMatch(Bytes(reply));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->kv_blocks, 3u);
  EXPECT_EQ(back->resume_blocks, 2u);
  EXPECT_EQ(back->tiers, m.tiers);
  EXPECT_EQ(back->resumable, m.resumable);
  EXPECT_EQ(back->group_blocks, m.group_blocks);
  EXPECT_FALSE(DecodeResumeMatch(Bytes(reply + "x")).ok());
  EXPECT_FALSE(DecodeResumeMatch(Bytes(reply.substr(0, reply.size() - 2))).ok());
}

}  // namespace
}  // namespace kvtier::protocol
