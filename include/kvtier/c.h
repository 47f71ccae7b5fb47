/* kvtier C API: a C client of kvtierd's native protocol (docs/protocol.md), in the style of
 * LevelDB's and RocksDB's c.h. It wraps the C++ client (kvtier/client.h).
 *
 * Conventions
 *  - Every object is an opaque handle made by a *_create or *_connect function and released by
 *    the matching *_destroy or *_close (which accept NULL).
 *  - Every call that can fail takes `char** errptr` as its last argument. On success *errptr is
 *    left alone; on failure it receives a malloc()ed, NUL-terminated message such as
 *    "UNAUTHENTICATED: invalid tenant or token", to be released with kvtier_free(). As in
 *    LevelDB, a message already in *errptr is freed and replaced, so one error variable can be
 *    reused across calls; set it to NULL before a call to tell whether that call failed.
 *    REQUIRES: errptr != NULL.
 *  - A miss is not an error: kvtier_client_get returns NULL with *errptr untouched, the
 *    `found`-style calls return 0, and per-item arrays leave the miss's error slot NULL.
 *  - Block keys are 32 bytes (KVTIER_BLOCK_KEY_SIZE); arrays of keys are contiguous,
 *    num_keys * 32 bytes. Values are arbitrary bytes, 1 byte to the server's max block size.
 *  - Memory returned by the library (values, messages) is malloc()ed; free it with
 *    kvtier_free(). Memory passed in is only read during the call, except where noted.
 *
 * Thread safety: a kvtier_client_t may be used by any number of threads at once (calls are
 * pipelined over its connections). Option, batch, namespace and stats handles are not
 * thread-safe: use each from one thread at a time.
 */

#ifndef KVTIER_C_H_
#define KVTIER_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVTIER_BLOCK_KEY_SIZE 32
/* Hex form of a key: 64 digits plus the terminating NUL. */
#define KVTIER_BLOCK_KEY_HEX_SIZE 65

typedef struct kvtier_client_t kvtier_client_t;
typedef struct kvtier_client_options_t kvtier_client_options_t;
typedef struct kvtier_put_options_t kvtier_put_options_t;
typedef struct kvtier_write_batch_t kvtier_write_batch_t;
typedef struct kvtier_namespace_t kvtier_namespace_t;
typedef struct kvtier_stats_t kvtier_stats_t;
typedef struct kvtier_resume_query_t kvtier_resume_query_t;

/* Element type of KV values (compression splits byte planes by it). Same numbers as the
 * C++ kvtier::KvDtype and the wire. */
enum {
  KVTIER_DTYPE_UNKNOWN = 0,
  KVTIER_DTYPE_BF16 = 1,
  KVTIER_DTYPE_FP16 = 2,
  KVTIER_DTYPE_FP32 = 3,
  KVTIER_DTYPE_FP8_E4M3 = 4,
  KVTIER_DTYPE_FP8_E5M2 = 5
};

/* Where a block was found. 0: absent. */
enum {
  KVTIER_TIER_ABSENT = 0,
  KVTIER_TIER_G2 = 2, /* host DRAM */
  KVTIER_TIER_G3 = 3, /* local SSD */
  KVTIER_TIER_G4 = 4  /* shared storage */
};

/* What a block holds, for eviction (kvtier::BlockRole; docs/state.md). */
enum {
  KVTIER_ROLE_KV = 0,             /* KV of a model that resumes after any block */
  KVTIER_ROLE_KV_NEEDS_STATE = 1, /* KV of a model that resumes only where its state values are */
  KVTIER_ROLE_STATE = 2           /* a state value; its parent is the block it belongs to */
};

/* A session's priority in kvtier_client_hint_session (kvtier::Store::SessionPriority). */
enum {
  KVTIER_PRIORITY_UNCHANGED = -1, /* the hint says nothing of priority */
  KVTIER_PRIORITY_NORMAL = 0,
  KVTIER_PRIORITY_LOW = 1, /* evicted first, after finished sessions */
  KVTIER_PRIORITY_HIGH = 2 /* evicted last, as a retained session */
};

/* Releases memory the library returned (values, error messages). NULL is fine. */
void kvtier_free(void* ptr);

/* The version of the library ("0.1.0"): of libkvtier-client, the library the installed package
   provides. */
const char* kvtier_version(void);

/* ---- Client options ---------------------------------------------------------------------- */

kvtier_client_options_t* kvtier_client_options_create(void);
void kvtier_client_options_destroy(kvtier_client_options_t* options);
/* "host:port" or "tcp://host:port" (TCP), "tls://host:port" (TCP with TLS), "unix:/path" or an
 * absolute path (Unix socket). Default "127.0.0.1:7380". */
void kvtier_client_options_set_endpoint(kvtier_client_options_t* options, const char* endpoint);
/* Tenant and token; both unset: the server's anonymous tenant (local clients only). */
void kvtier_client_options_set_tenant(kvtier_client_options_t* options, const char* tenant);
void kvtier_client_options_set_token(kvtier_client_options_t* options, const char* token);
void kvtier_client_options_set_client_name(kvtier_client_options_t* options, const char* name);
/* Connections kept open (default 1); calls are spread over them. */
void kvtier_client_options_set_connections(kvtier_client_options_t* options, uint32_t n);
/* How long a call keeps retrying after UNAVAILABLE (kvtierd restarting or being upgraded),
 * reconnecting as needed (default 10,000 ms; 0: the first UNAVAILABLE is returned). */
void kvtier_client_options_set_retry_timeout_ms(kvtier_client_options_t* options, uint32_t ms);
/* How long a request may wait without progress before its connection is given up and the call
 * retried as above (default 120,000 ms; 0: no limit). */
void kvtier_client_options_set_io_timeout_ms(kvtier_client_options_t* options, uint32_t ms);
/* TLS 1.3 on TCP (off by default; a "tls://" endpoint turns it on too). */
void kvtier_client_options_set_tls(kvtier_client_options_t* options, int enable);
/* PEM file of the CA certificates that sign the server's; NULL or "": the system's. */
void kvtier_client_options_set_tls_ca_file(kvtier_client_options_t* options, const char* path);
/* Whether to check the server's certificate chain and name (default 1). 0 is for tests only. */
void kvtier_client_options_set_tls_verify_peer(kvtier_client_options_t* options, int verify);
/* Name (or IP address) the server's certificate must carry; NULL or "": the endpoint's host. */
void kvtier_client_options_set_tls_server_name(kvtier_client_options_t* options, const char* name);
/* Client certificate and key (PEM), for servers that require one. */
void kvtier_client_options_set_tls_cert_file(kvtier_client_options_t* options, const char* path);
void kvtier_client_options_set_tls_key_file(kvtier_client_options_t* options, const char* path);

/* ---- Connection -------------------------------------------------------------------------- */

/* Connects and authenticates. NULL with *errptr set on failure ("UNAVAILABLE: ..." when the
 * server cannot be reached, "UNAUTHENTICATED: ..." for a wrong tenant or token). */
kvtier_client_t* kvtier_client_connect(const kvtier_client_options_t* options, char** errptr);
/* Closes the connections. REQUIRES: no call on `client` is in progress. NULL is fine. */
void kvtier_client_close(kvtier_client_t* client);

/* What the server said at connect time. The string lives as long as the client. */
const char* kvtier_client_tenant(const kvtier_client_t* client);
uint64_t kvtier_client_max_block_bytes(const kvtier_client_t* client);
uint32_t kvtier_client_max_batch(const kvtier_client_t* client);

/* Round trip without touching the store. */
void kvtier_client_ping(kvtier_client_t* client, char** errptr);

/* ---- Puts -------------------------------------------------------------------------------- */

/* Per-block metadata of a put. Defaults: no parent, no session, unknown dtype. */
kvtier_put_options_t* kvtier_put_options_create(void);
void kvtier_put_options_destroy(kvtier_put_options_t* options);
/* The previous block of the same prompt (32 bytes, copied), or NULL for none. */
void kvtier_put_options_set_parent(kvtier_put_options_t* options, const unsigned char* parent_key);
/* The session the block belongs to (see kvtier_client_delete_session); 0 = none. */
void kvtier_put_options_set_session(kvtier_put_options_t* options, uint64_t session);
/* One of KVTIER_DTYPE_*. */
void kvtier_put_options_set_dtype(kvtier_put_options_t* options, int dtype);
/* One of KVTIER_ROLE_*. */
void kvtier_put_options_set_role(kvtier_put_options_t* options, int role);

/* Stores one block (a key already present stays as it is: OK). `options` may be NULL. */
void kvtier_client_put(kvtier_client_t* client, const unsigned char* key, const char* value,
                       size_t value_len, const kvtier_put_options_t* options, char** errptr);

/* A batch of puts sent together (split into as many requests as the server's limits need).
 * The batch copies keys and options but NOT values: each value must stay valid and unchanged
 * until the batch is cleared or destroyed. */
kvtier_write_batch_t* kvtier_write_batch_create(void);
void kvtier_write_batch_destroy(kvtier_write_batch_t* batch);
void kvtier_write_batch_clear(kvtier_write_batch_t* batch);
size_t kvtier_write_batch_count(const kvtier_write_batch_t* batch);
/* `options` may be NULL. */
void kvtier_write_batch_put(kvtier_write_batch_t* batch, const unsigned char* key,
                            const char* value, size_t value_len,
                            const kvtier_put_options_t* options);

/* Stores every block of the batch. Returns how many succeeded. When some failed, *errptr says
 * how many and why the first did; `errs` (NULL, or an array of kvtier_write_batch_count slots,
 * which must be NULL or a previous message) receives each failed block's message in its slot
 * and NULL for the others. */
size_t kvtier_client_put_many(kvtier_client_t* client, const kvtier_write_batch_t* batch,
                              char** errs, char** errptr);

/* Stores every block of the batch or none (kvtier::Client::PutAtomic: a boundary's KV block
 * with its state values), in one request: the batch must fit the server's max_batch and
 * max_frame_bytes. */
void kvtier_client_put_atomic(kvtier_client_t* client, const kvtier_write_batch_t* batch,
                              char** errptr);

/* ---- Gets -------------------------------------------------------------------------------- */

/* The block's bytes, malloc()ed (free with kvtier_free), their count in *value_len; NULL for a
 * miss (*errptr untouched, *value_len 0) and NULL with *errptr set for an error. */
char* kvtier_client_get(kvtier_client_t* client, const unsigned char* key, size_t* value_len,
                        char** errptr);

/* Copies the block into buf[0, buf_len). Returns 1 when found (*value_len: its size), 0 for a
 * miss. A block larger than buf_len is an error ("OUT_OF_RANGE: ..."), nothing is copied and
 * *value_len says the size needed. */
int kvtier_client_get_into(kvtier_client_t* client, const unsigned char* key, char* buf,
                           size_t buf_len, size_t* value_len, char** errptr);

/* Reads num_keys blocks (keys: num_keys * 32 bytes). For each i: values[i] is a malloc()ed copy
 * and value_lens[i] its size, or values[i] NULL and value_lens[i] 0 for a miss or an error;
 * errs[i] is NULL for a hit or a miss and a message for an error (a failed connection fails
 * every item). The slots of `errs` must be NULL or previous messages (they are replaced). */
void kvtier_client_get_many(kvtier_client_t* client, size_t num_keys, const unsigned char* keys,
                            char** values, size_t* value_lens, char** errs);

/* ---- Lookups ----------------------------------------------------------------------------- */

/* For each key, KVTIER_TIER_* of the tier holding it (KVTIER_TIER_ABSENT when absent) in
 * tiers[i]. Counts as an access of the blocks. */
void kvtier_client_exists(kvtier_client_t* client, size_t num_keys, const unsigned char* keys,
                          unsigned char* tiers, char** errptr);

/* How many leading keys are present (lookup stops at the first miss). When `tiers` is not
 * NULL (num_keys slots), tiers[i] receives the tier of each of the returned leading blocks.
 * Returns 0 with *errptr set on error. */
size_t kvtier_client_lookup_prefix(kvtier_client_t* client, size_t num_keys,
                                   const unsigned char* keys, unsigned char* tiers,
                                   char** errptr);

/* State beside KV (docs/state.md): the groups an engine restores, each with its window (0:
 * every block's value; w >= 1: the last w blocks'; 1: a state at the boundary). */
kvtier_resume_query_t* kvtier_resume_query_create(uint32_t keys_per_block);
void kvtier_resume_query_destroy(kvtier_resume_query_t* query);
void kvtier_resume_query_add_group(kvtier_resume_query_t* query, const char* name,
                                   uint32_t window_blocks);

/* The longest prefix, in blocks, the engine can resume from with the query's groups
 * (kvtier::Client::LookupResume). *kv_blocks (may be NULL) receives the leading blocks whose
 * keys are all present. When `resumable` is not NULL (num_keys / keys_per_block slots), it
 * receives every resumable length, ascending, and *num_resumable their count. Returns 0 with
 * *errptr set on error. */
size_t kvtier_client_lookup_resume(kvtier_client_t* client, size_t num_keys,
                                   const unsigned char* keys, const kvtier_resume_query_t* query,
                                   size_t* kv_blocks, uint32_t* resumable, size_t* num_resumable,
                                   char** errptr);

/* ---- Block keys from tokens (docs/block_keys.md); pure, no server involved ---------------- */

/* A namespace: tenant and model fingerprint plus the KV layout. Defaults: bf16, 256 tokens per
 * block, tp 0 of 1; layers, kv heads and head dim must be set. */
kvtier_namespace_t* kvtier_namespace_create(const char* tenant, const char* model);
void kvtier_namespace_destroy(kvtier_namespace_t* ns);
void kvtier_namespace_set_layout(kvtier_namespace_t* ns, uint32_t num_layers,
                                 uint32_t num_kv_heads, uint32_t head_dim, int dtype,
                                 uint32_t tokens_per_block);
void kvtier_namespace_set_tensor_parallel(kvtier_namespace_t* ns, uint32_t rank, uint32_t size);

/* Writes the key of every full block of tokens[0, num_tokens) to keys_out (max_keys * 32
 * bytes) and returns how many full blocks there are (trailing tokens get no key). When that is
 * more than max_keys, only max_keys keys are written: call again with room for the returned
 * count. 0 with *errptr set for an invalid namespace. */
size_t kvtier_compute_block_keys(const kvtier_namespace_t* ns, const uint32_t* tokens,
                                 size_t num_tokens, unsigned char* keys_out, size_t max_keys,
                                 char** errptr);

/* kvtier_client_lookup_prefix over the keys of tokens' full blocks in namespace `ns`. */
size_t kvtier_client_lookup_prefix_tokens(kvtier_client_t* client, const kvtier_namespace_t* ns,
                                          const uint32_t* tokens, size_t num_tokens,
                                          unsigned char* tiers, size_t max_tiers, char** errptr);

/* ---- Deletion and pinning ---------------------------------------------------------------- */

/* Returns 1 when the block was deleted, 0 when it was not there (not an error). */
int kvtier_client_delete(kvtier_client_t* client, const unsigned char* key, char** errptr);
/* Returns how many of the blocks were deleted; absent ones are skipped silently. *errptr
 * reports other failures. */
size_t kvtier_client_delete_many(kvtier_client_t* client, size_t num_keys,
                                 const unsigned char* keys, char** errptr);
/* Deletes every block this tenant put with `session`, on every tier. *memory_blocks and
 * *disk_blocks (each may be NULL) receive the copies removed from DRAM and SSD. */
void kvtier_client_delete_session(kvtier_client_t* client, uint64_t session,
                                  uint64_t* memory_blocks, uint64_t* disk_blocks, char** errptr);
/* Tells the server what the caller knows of a session of this tenant (kvtier::Client::
 * HintSession): `retain_seconds` it comes back within (a tool call; 0 = nothing said), `finished`
 * non-zero when it is over (alone), `priority` one of KVTIER_PRIORITY_*. */
void kvtier_client_hint_session(kvtier_client_t* client, uint64_t session,
                                uint32_t retain_seconds, int finished, int priority,
                                char** errptr);
/* Deletes every block of the client's tenant, on every tier. */
void kvtier_client_delete_all_blocks(kvtier_client_t* client, uint64_t* memory_blocks,
                                     uint64_t* disk_blocks, char** errptr);
/* Makes the tenant's blocks durable (kvtier::Client::Flush); *written (may be NULL) receives
   how many blocks went to G3. */
void kvtier_client_flush(kvtier_client_t* client, uint64_t* written, char** errptr);

/* Pins nest: each pin needs its unpin. `errs` as for kvtier_client_put_many (may be NULL);
 * *errptr says how many failed and why the first did (pinning an absent block fails, as does
 * unpinning a block that is not pinned). */
void kvtier_client_pin(kvtier_client_t* client, size_t num_keys, const unsigned char* keys,
                       char** errs, char** errptr);
void kvtier_client_unpin(kvtier_client_t* client, size_t num_keys, const unsigned char* keys,
                         char** errs, char** errptr);

/* ---- Statistics of the client's tenant --------------------------------------------------- */

kvtier_stats_t* kvtier_client_stats(kvtier_client_t* client, char** errptr);
void kvtier_stats_destroy(kvtier_stats_t* stats);
/* The tenant's name; lives as long as `stats`. */
const char* kvtier_stats_tenant(const kvtier_stats_t* stats);
/* The counters: "blocks", "bytes", "hits", "misses", "puts", ... (docs/protocol.md, STATS). */
size_t kvtier_stats_count(const kvtier_stats_t* stats);
const char* kvtier_stats_name(const kvtier_stats_t* stats, size_t i);
uint64_t kvtier_stats_value(const kvtier_stats_t* stats, size_t i);
/* The counter called `name`; 0 with *found 0 (found may be NULL) when there is none. */
uint64_t kvtier_stats_get(const kvtier_stats_t* stats, const char* name, int* found);

/* ---- Key helpers ------------------------------------------------------------------------- */

/* Writes the 64 lowercase hex digits of `key` and a NUL to out[KVTIER_BLOCK_KEY_HEX_SIZE]. */
void kvtier_block_key_to_hex(const unsigned char* key, char* out);
/* Parses 64 hex digits into key[32]. Returns 1 on success; 0 with *errptr set otherwise. */
int kvtier_block_key_from_hex(const char* hex, unsigned char* key, char** errptr);
/* The key of state group `group`'s value at block `block_key` (docs/block_keys.md, "State
 * keys") into key_out[32]. Returns 1 on success; 0 with *errptr set for a bad group name. */
int kvtier_state_key(const unsigned char* block_key, const char* group, unsigned char* key_out,
                     char** errptr);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_C_H_ */
