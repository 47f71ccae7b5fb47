// Bodies of the native protocol's requests and responses (docs/protocol.md, "Messages").
// Shared by kvtierd and the C++ client so that both sides encode exactly the same bytes.
//
// Decoders take untrusted bytes: every count and length is checked against the body and the
// given limits, and a body with bytes left over is malformed. They return InvalidArgument
// with a message naming what was wrong. Thread-safe (pure functions).

#ifndef KVTIER_PROTOCOL_MESSAGES_H_
#define KVTIER_PROTOCOL_MESSAGES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/protocol/wire.h"

namespace kvtier::protocol {

struct HelloRequest {
  uint8_t max_version = kVersion;  // Highest protocol version the client speaks.
  uint64_t features = 0;           // Requested feature bits.
  std::string tenant;              // Empty: the server's anonymous tenant, if it has one.
  std::string token;
  std::string client_name;         // Free text for logs.
};

struct HelloResponse {
  uint8_t version = kVersion;
  uint64_t features = 0;           // Granted feature bits.
  uint32_t max_frame_bytes = 0;    // Largest request body the server accepts.
  uint64_t max_block_bytes = 0;    // Largest value a put may carry.
  uint32_t max_batch = 0;          // Most keys in one request.
  std::string tenant;              // The tenant this connection acts for.
  std::string server;              // "kvtierd <version>".
};

struct AuthRequest {
  std::string tenant;
  std::string token;
};

// DELETE's scope byte. Only keys remain: scopes 1 (session) and 2 (tenant) were never served
// and are retired in favour of the DELETE_SESSION and DELETE_TENANT requests.
enum class DeleteScope : uint8_t { kKeys = 0 };

struct DeleteRequest {
  DeleteScope scope = DeleteScope::kKeys;
  std::vector<BlockKey> keys;
};

// One entry of a PUT_MANY directory; the value bytes follow the directory.
struct PutEntry {
  BlockKey key;
  std::optional<BlockKey> parent;
  uint64_t size = 0;
  SessionId session = 0;         // 0: none (not encoded).
  std::optional<KvDtype> dtype;  // nullopt: unknown (not encoded).
  std::optional<EngineHash> engine_hash = std::nullopt;  // nullopt: none (not encoded).
  BlockRole role = BlockRole::kKv;                       // kKv: not encoded.
};

// PUT_MANY entry flag bits.
inline constexpr uint8_t kEntryHasParent = 1u << 0;
inline constexpr uint8_t kEntryHasSession = 1u << 1;  // Needs kFeatureSessions.
inline constexpr uint8_t kEntryHasDtype = 1u << 2;    // Needs kFeatureSessions.
// u8 n (bit 7: an unsigned integer, big-endian; bits 0-6: 1 to 32 bytes, at most 8 for an
// integer), then the n bytes. Needs kFeatureEngineHashes.
inline constexpr uint8_t kEntryHasEngineHash = 1u << 3;
// u8 role: 1 KV that needs state, 2 a state value (BlockRole). Needs kFeatureState.
inline constexpr uint8_t kEntryHasRole = 1u << 4;

// LOOKUP_RESUME: the query and the prompt's keys.
struct ResumeRequest {
  ResumeQuery query;
  std::vector<BlockKey> keys;
};
// LOOKUP_RESUME request flag bits.
inline constexpr uint8_t kResumeAllLengths = 1u << 0;

struct NamedCounter {
  std::string name;
  uint64_t value = 0;
};

struct StatsReply {
  std::string tenant;
  std::vector<NamedCounter> counters;
};

void EncodeHello(const HelloRequest& m, std::string* out);
Result<HelloRequest> DecodeHelloRequest(std::span<const std::byte> body);
// A response body starts with its status; the rest is present only when the status is OK.
void EncodeHelloResponse(const HelloResponse& m, std::string* out);
Result<HelloResponse> DecodeHelloResponse(std::span<const std::byte> body);

void EncodeAuth(const AuthRequest& m, std::string* out);
Result<AuthRequest> DecodeAuthRequest(std::span<const std::byte> body);

// LOOKUP_PREFIX, GET_MANY, EXISTS, PIN, UNPIN and PREFETCH requests: u32 count, keys.
void EncodeKeyList(std::span<const BlockKey> keys, std::string* out);
// InvalidArgument for more than max_batch keys or a body that is not exactly count keys.
Result<std::vector<BlockKey>> DecodeKeyList(std::span<const std::byte> body, uint32_t max_batch);

void EncodeDelete(const DeleteRequest& m, std::string* out);
// InvalidArgument for a retired or unknown scope, and as DecodeKeyList for the keys.
Result<DeleteRequest> DecodeDeleteRequest(std::span<const std::byte> body, uint32_t max_batch);

// DELETE_SESSION: u64 session id (non-zero). DELETE_TENANT has an empty body.
void EncodeDeleteSession(SessionId session, std::string* out);
// InvalidArgument for a body that is not exactly 8 bytes, or session 0 ("no session").
Result<SessionId> DecodeDeleteSessionRequest(std::span<const std::byte> body);

// HINT_SESSION (kFeatureHints): u64 session id (non-zero), u32 retain_seconds (0 = none), u8
// flags (bit 0 finished, bit 1 a priority follows), u8 priority (Store::SessionPriority; 0 when
// flag bit 1 is clear). The reply is a bare status.
struct HintSessionRequest {
  SessionId session = 0;
  Store::SessionHint hint;
};
void EncodeHintSession(const HintSessionRequest& m, std::string* out);
// InvalidArgument for a body that is not exactly 14 bytes, session 0, unknown flag bits or an
// unknown priority; what the hint asks is the Store's to judge.
Result<HintSessionRequest> DecodeHintSessionRequest(std::span<const std::byte> body);

// Shared by the body codecs (this file's and shm_messages.h's).
// InvalidArgument "malformed <what> body".
Status Malformed(std::string_view what);
// Reads the leading status of a response; on OK the reader is positioned after it.
Status ReadLeadingStatus(BodyReader* r);
// Reads an entry directory (EncodePutDirectory) of the request `op` ("PUT_MANY", "SHM_ALLOC"),
// leaving `r` after it. InvalidArgument naming `op` for a count that the body cannot hold or
// over max_batch, an entry flag outside `known_flags`, an unknown dtype, engine hash size or
// role, or a size of 0 or over max_block_bytes.
Result<std::vector<PutEntry>> ReadPutDirectory(BodyReader* r, std::string_view op,
                                               uint8_t known_flags, uint32_t max_batch,
                                               uint64_t max_block_bytes);

// PUT_MANY: the directory (u32 count, entries); the caller sends the values after it, in order.
// Session and dtype are encoded only when set, so a request without them is byte-for-byte what
// a server without kFeatureSessions understands.
void EncodePutDirectory(std::span<const PutEntry> entries, std::string* out);
// The most bytes one PUT_MANY entry takes: key, flags, parent, session, dtype, engine hash
// (its length byte and up to 32 bytes), role, size.
inline constexpr size_t kMaxPutEntryBytes = 2 * kBlockKeySize + 1 + 8 + 1 + (1 + kBlockKeySize) + 1 + 8;
// The directory of a PUT_MANY body whose values are still to come.
struct PutManyHead {
  std::vector<PutEntry> entries;
  size_t directory_bytes = 0;  // The count and the entries; the values follow.
};
// Reads the directory at the front of `head`, the first bytes of a PUT_MANY body of
// `body_length` bytes. Errors as DecodePutMany's (a directory cut short by the end of `head` is
// malformed).
Result<PutManyHead> DecodePutManyHead(std::span<const std::byte> head, size_t body_length,
                                      uint32_t max_batch, uint64_t max_block_bytes);
// The writes of a PUT_MANY body; their values are views into `body`. InvalidArgument when the
// sizes do not add up to the bytes after the directory, a size is 0 or over max_block_bytes,
// an entry has unknown flags or an unknown dtype, or there are more than max_batch entries.
Result<std::vector<BlockWrite>> DecodePutMany(std::span<const std::byte> body, uint32_t max_batch,
                                              uint64_t max_block_bytes);

// LOOKUP_RESUME: u32 keys_per_block, u8 flags, u8 groups, (u32 window, string16 name) per
// group, then the keys as a key list. InvalidArgument as DecodeKeyList for the keys, for
// unknown flags, and for more than kMaxStateGroups groups; the Store checks the rest.
void EncodeResumeRequest(const ResumeRequest& m, std::string* out);
Result<ResumeRequest> DecodeResumeRequest(std::span<const std::byte> body, uint32_t max_batch);

// Response bodies.
// DELETE_SESSION and DELETE_TENANT: OK, u64 memory_blocks, u64 disk_blocks, and u64
// shared_blocks when `with_shared` (kFeatureSharedReport granted). Decoding reads both forms.
void EncodeDeletionReport(const DeletionReport& report, bool with_shared, std::string* out);
Result<DeletionReport> DecodeDeletionReport(std::span<const std::byte> body);
// FLUSH: OK, u64 blocks written to G3.
void EncodeFlushReply(uint64_t written, std::string* out);
Result<uint64_t> DecodeFlushReply(std::span<const std::byte> body);
// Just a status (PING, PREFETCH, errors; any response whose status is not OK).
void EncodeStatusOnly(const Status& status, std::string* out);
// One status per item (PUT_MANY, DELETE, PIN, UNPIN): OK, u32 count, statuses.
void EncodeItemStatuses(std::span<const Status> statuses, std::string* out);
Result<std::vector<Status>> DecodeItemStatuses(std::span<const std::byte> body);
// LOOKUP_PREFIX: OK, u32 num_blocks, one tier byte per block.
void EncodePrefixMatch(const PrefixMatch& match, std::string* out);
Result<PrefixMatch> DecodePrefixMatch(std::span<const std::byte> body);
// LOOKUP_RESUME: OK, u32 kv_blocks, u32 resume_blocks, u32 n + n tier bytes, u8 g + g u32
// group_blocks, u32 r + r u32 resumable lengths.
void EncodeResumeMatch(const ResumeMatch& match, std::string* out);
Result<ResumeMatch> DecodeResumeMatch(std::span<const std::byte> body);
// EXISTS: OK, u32 count, one byte per key: 0 absent, else the TierLevel it was found in.
void EncodeExists(std::span<const uint8_t> tiers, std::string* out);
Result<std::vector<uint8_t>> DecodeExists(std::span<const std::byte> body);
// AUTH: OK, tenant name.
void EncodeAuthResponse(std::string_view tenant, std::string* out);
Result<std::string> DecodeAuthResponse(std::span<const std::byte> body);
// STATS: OK, tenant name, u16 count, (name, u64) pairs.
void EncodeStats(std::string_view tenant, std::span<const NamedCounter> counters,
                 std::string* out);
Result<StatsReply> DecodeStats(std::span<const std::byte> body);
// GET_MANY: OK, u32 count, per item (status, u64 size when OK); then every found value, in
// order. This encodes the part before the values.
void EncodeGetDirectory(std::span<const Result<BlockHandle>> items, std::string* out);
// A whole GET_MANY response body: one entry per item, the value a view into `body`.
Result<std::vector<Result<std::span<const std::byte>>>> DecodeGetMany(
    std::span<const std::byte> body);

// The status at the front of any response body (Unknown when the body is too short for one).
Status DecodeResponseStatus(std::span<const std::byte> body);

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_MESSAGES_H_
