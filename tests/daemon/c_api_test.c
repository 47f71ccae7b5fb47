/* The C API (include/kvtier/c.h) from C11, against a real kvtierd this test starts.
 *
 * Usage: c_api_test <kvtierd> <case>, where case is "basic" or "sessions" (one ctest each).
 * kvtierd runs on ephemeral ports (reported through --port-file) with a private data directory;
 * readiness is awaited by polling for the port file under a deadline (reaching it fails). */

#define _GNU_SOURCE
#include <assert.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/c.h"

/* Assertions that stay on in release builds. */
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      abort();                                                                   \
    }                                                                            \
  } while (0)
#define CHECK_NO_ERROR(err)                                                                \
  do {                                                                                     \
    if ((err) != NULL) {                                                                   \
      fprintf(stderr, "%s:%d: unexpected error: %s\n", __FILE__, __LINE__, (err));        \
      abort();                                                                             \
    }                                                                                      \
  } while (0)
#define CHECK_CONTAINS(text, part)                                                         \
  do {                                                                                     \
    if ((text) == NULL || strstr((text), (part)) == NULL) {                                \
      fprintf(stderr, "%s:%d: expected \"%s\" in \"%s\"\n", __FILE__, __LINE__, (part),   \
              (text) ? (text) : "(null)");                                                 \
      abort();                                                                             \
    }                                                                                      \
  } while (0)

/* ---- A kvtierd of our own ---- */

typedef struct {
  char dir[256];
  pid_t pid;
  unsigned native_port;
  char unix_socket[640];
} daemon_t;

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void daemon_start(daemon_t* d, const char* kvtierd) {
  snprintf(d->dir, sizeof(d->dir), "/tmp/kvtier_c_api_test_XXXXXX");
  CHECK(mkdtemp(d->dir) != NULL);
  char config_path[512], port_path[512];
  snprintf(config_path, sizeof(config_path), "%s/kvtierd.toml", d->dir);
  snprintf(port_path, sizeof(port_path), "%s/ports", d->dir);
  FILE* f = fopen(config_path, "w");
  CHECK(f != NULL);
  fprintf(f,
          "data_dir = \"%s\"\n"
          "[server]\nnative_listen = \"127.0.0.1:0\"\nresp_listen = \"\"\nhttp_listen = \"\"\n"
          "unix_socket = \"kvtierd.sock\"\nthreads = 2\n"
          "[memory]\ncapacity = \"64MiB\"\nwarm_restart = false\n[store]\nmax_block_bytes = \"1MiB\"\n"
          "[[tenants]]\nname = \"default\"\n"
          "[[tenants]]\nname = \"acme\"\ntoken = \"acme-token\"\n",
          d->dir);
  fclose(f);
  d->pid = fork();
  CHECK(d->pid >= 0);
  if (d->pid == 0) {
    execl(kvtierd, "kvtierd", "--config", config_path, "--port-file", port_path, (char*)NULL);
    _exit(127);
  }
  time_t deadline = time(NULL) + 60;
  struct stat st;
  while (stat(port_path, &st) != 0) {
    int status;
    CHECK(waitpid(d->pid, &status, WNOHANG) == 0); /* kvtierd must not exit during start-up */
    CHECK(time(NULL) < deadline);
    struct timespec ts = {0, 5 * 1000 * 1000}; /* polling for readiness */
    nanosleep(&ts, NULL);
  }
  f = fopen(port_path, "r");
  CHECK(f != NULL);
  char line[512];
  while (fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "native_port=", 12) == 0) d->native_port = (unsigned)atoi(line + 12);
    if (strncmp(line, "unix_socket=", 12) == 0) {
      snprintf(d->unix_socket, sizeof(d->unix_socket), "unix:%s", line + 12);
    }
  }
  fclose(f);
  CHECK(d->native_port != 0);
}

/* Stops kvtierd (SIGTERM) and checks it exits cleanly. */
static void daemon_stop(daemon_t* d) {
  if (d->pid <= 0) return;
  kill(d->pid, SIGTERM);
  int status = 0;
  CHECK(waitpid(d->pid, &status, 0) == d->pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  d->pid = -1;
}

static void daemon_cleanup(daemon_t* d) {
  daemon_stop(d);
  nftw(d->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static kvtier_client_t* connect_as(const char* endpoint, const char* tenant, const char* token,
                                   char** err) {
  kvtier_client_options_t* o = kvtier_client_options_create();
  kvtier_client_options_set_endpoint(o, endpoint);
  kvtier_client_options_set_tenant(o, tenant);
  kvtier_client_options_set_token(o, token);
  kvtier_client_options_set_client_name(o, "c_api_test");
  kvtier_client_options_set_connections(o, 2);
  kvtier_client_t* c = kvtier_client_connect(o, err);
  kvtier_client_options_destroy(o);
  return c;
}

static void make_key(unsigned char* key, uint32_t a) {
  memset(key, 0, KVTIER_BLOCK_KEY_SIZE);
  memcpy(key, &a, sizeof(a));
  key[31] = 0xc1;
}

static void fill(char* buf, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    buf[i] = (char)x;
  }
}

/* ---- Cases ---- */

static void test_errors_and_auth(const daemon_t* d, const char* tcp) {
  /* A wrong token: no client, and a message a user can act on. A message already in err is
   * freed and replaced (LevelDB's convention). */
  char* err = malloc(16);
  strcpy(err, "stale message");
  kvtier_client_t* c = connect_as(tcp, "acme", "wrong-token", &err);
  CHECK(c == NULL);
  CHECK_CONTAINS(err, "UNAUTHENTICATED");
  CHECK_CONTAINS(err, "invalid tenant or token");
  CHECK(strstr(err, "stale") == NULL);
  kvtier_free(err);
  err = NULL;

  /* Nobody listening: UNAVAILABLE, not a crash or a hang. */
  c = connect_as("unix:/nonexistent/kvtierd.sock", NULL, NULL, &err);
  CHECK(c == NULL);
  CHECK_CONTAINS(err, "UNAVAILABLE");
  kvtier_free(err);
  err = NULL;

  /* The anonymous tenant over the Unix socket; acme with its token over TCP. */
  kvtier_client_t* anon = connect_as(d->unix_socket, NULL, NULL, &err);
  CHECK_NO_ERROR(err);
  CHECK(strcmp(kvtier_client_tenant(anon), "default") == 0);
  c = connect_as(tcp, "acme", "acme-token", &err);
  CHECK_NO_ERROR(err);
  CHECK(strcmp(kvtier_client_tenant(c), "acme") == 0);
  CHECK(kvtier_client_max_block_bytes(c) == 1024 * 1024);
  kvtier_client_ping(c, &err);
  CHECK_NO_ERROR(err);

  /* Tenants do not see each other's blocks. */
  unsigned char key[KVTIER_BLOCK_KEY_SIZE];
  make_key(key, 900);
  kvtier_client_put(c, key, "acme-only", 9, NULL, &err);
  CHECK_NO_ERROR(err);
  size_t len = 123;
  char* v = kvtier_client_get(anon, key, &len, &err);
  CHECK(v == NULL && len == 0);
  CHECK_NO_ERROR(err);
  kvtier_client_close(anon);
  kvtier_client_close(c);
}

static void test_round_trips(const char* tcp) {
  char* err = NULL;
  kvtier_client_t* c = connect_as(tcp, "acme", "acme-token", &err);
  CHECK_NO_ERROR(err);
  kvtier_stats_t* before = kvtier_client_stats(c, &err);
  CHECK_NO_ERROR(err);
  uint64_t blocks_before = kvtier_stats_get(before, "blocks", NULL);
  uint64_t puts_before = kvtier_stats_get(before, "puts", NULL);
  kvtier_stats_destroy(before);

  /* Put / get: the exact bytes come back, NULs included. */
  unsigned char key[KVTIER_BLOCK_KEY_SIZE];
  make_key(key, 1);
  const char value[] = "kv\0bytes\0with\0nuls";
  kvtier_client_put(c, key, value, sizeof(value), NULL, &err);
  CHECK_NO_ERROR(err);
  size_t len = 0;
  char* got = kvtier_client_get(c, key, &len, &err);
  CHECK_NO_ERROR(err);
  CHECK(got != NULL && len == sizeof(value) && memcmp(got, value, len) == 0);
  kvtier_free(got);

  /* Into a caller buffer: fits; too small is OUT_OF_RANGE with the size needed. */
  char buf[64];
  CHECK(kvtier_client_get_into(c, key, buf, sizeof(buf), &len, &err) == 1);
  CHECK_NO_ERROR(err);
  CHECK(len == sizeof(value) && memcmp(buf, value, len) == 0);
  CHECK(kvtier_client_get_into(c, key, buf, 4, &len, &err) == 0);
  CHECK_CONTAINS(err, "OUT_OF_RANGE");
  CHECK(len == sizeof(value));
  kvtier_free(err);
  err = NULL;

  /* A miss is not an error. */
  unsigned char absent[KVTIER_BLOCK_KEY_SIZE];
  make_key(absent, 999999);
  got = kvtier_client_get(c, absent, &len, &err);
  CHECK(got == NULL && len == 0);
  CHECK_NO_ERROR(err);
  CHECK(kvtier_client_get_into(c, absent, buf, sizeof(buf), &len, &err) == 0);
  CHECK_NO_ERROR(err);

  /* Bad input is an error naming the limit; the client carries on. */
  size_t big_len = 1024 * 1024 + 1;
  char* big = calloc(big_len, 1);
  kvtier_client_put(c, absent, big, big_len, NULL, &err);
  CHECK_CONTAINS(err, "INVALID_ARGUMENT");
  CHECK_CONTAINS(err, "max_block_bytes");
  free(big);
  kvtier_free(err);
  err = NULL;
  kvtier_client_ping(c, &err);
  CHECK_NO_ERROR(err);

  /* A chain of 4 blocks of 64 KiB put as one batch, with parents, a session and a dtype. */
  enum { kBlocks = 4, kSize = 64 * 1024 };
  unsigned char keys[(kBlocks + 1) * KVTIER_BLOCK_KEY_SIZE];
  char* values[kBlocks];
  kvtier_write_batch_t* batch = kvtier_write_batch_create();
  kvtier_put_options_t* po = kvtier_put_options_create();
  kvtier_put_options_set_session(po, 77);
  kvtier_put_options_set_dtype(po, KVTIER_DTYPE_BF16);
  for (int i = 0; i < kBlocks; ++i) {
    make_key(keys + i * KVTIER_BLOCK_KEY_SIZE, 100 + (uint32_t)i);
    values[i] = malloc(kSize);
    fill(values[i], kSize, (uint32_t)i);
    kvtier_put_options_set_parent(po, i == 0 ? NULL : keys + (i - 1) * KVTIER_BLOCK_KEY_SIZE);
    kvtier_write_batch_put(batch, keys + i * KVTIER_BLOCK_KEY_SIZE, values[i], kSize, po);
  }
  make_key(keys + kBlocks * KVTIER_BLOCK_KEY_SIZE, 555555); /* never stored */
  CHECK(kvtier_write_batch_count(batch) == kBlocks);
  char* errs[kBlocks + 1] = {0};
  CHECK(kvtier_client_put_many(c, batch, errs, &err) == kBlocks);
  CHECK_NO_ERROR(err);
  for (int i = 0; i < kBlocks; ++i) CHECK(errs[i] == NULL);

  /* get_many: hits carry their bytes, the miss is NULL with no error. */
  char* vals[kBlocks + 1];
  size_t lens[kBlocks + 1];
  kvtier_client_get_many(c, kBlocks + 1, keys, vals, lens, errs);
  for (int i = 0; i < kBlocks; ++i) {
    CHECK(errs[i] == NULL);
    CHECK(vals[i] != NULL && lens[i] == kSize && memcmp(vals[i], values[i], kSize) == 0);
    kvtier_free(vals[i]);
  }
  CHECK(vals[kBlocks] == NULL && lens[kBlocks] == 0 && errs[kBlocks] == NULL);

  /* exists and lookup_prefix. */
  unsigned char tiers[kBlocks + 1];
  kvtier_client_exists(c, kBlocks + 1, keys, tiers, &err);
  CHECK_NO_ERROR(err);
  for (int i = 0; i < kBlocks; ++i) CHECK(tiers[i] == KVTIER_TIER_G2);
  CHECK(tiers[kBlocks] == KVTIER_TIER_ABSENT);
  memset(tiers, 0xff, sizeof(tiers));
  CHECK(kvtier_client_lookup_prefix(c, kBlocks + 1, keys, tiers, &err) == kBlocks);
  CHECK_NO_ERROR(err);
  CHECK(tiers[0] == KVTIER_TIER_G2 && tiers[kBlocks - 1] == KVTIER_TIER_G2);

  /* Pins nest; unpinning an unpinned block fails, in its slot and in the summary. */
  kvtier_client_pin(c, 1, keys, NULL, &err);
  CHECK_NO_ERROR(err);
  kvtier_client_unpin(c, 2, keys, errs, &err);
  CHECK_CONTAINS(err, "FAILED_PRECONDITION");
  CHECK_CONTAINS(err, "1 of 2 unpins failed");
  CHECK(errs[0] == NULL);
  CHECK_CONTAINS(errs[1], "FAILED_PRECONDITION");
  kvtier_free(errs[1]);
  errs[1] = NULL;
  kvtier_free(err);
  err = NULL;

  /* Deletes: 1 then 0 (absent is not an error); delete_many counts. */
  CHECK(kvtier_client_delete(c, keys, &err) == 1);
  CHECK_NO_ERROR(err);
  CHECK(kvtier_client_delete(c, keys, &err) == 0);
  CHECK_NO_ERROR(err);
  CHECK(kvtier_client_delete_many(c, kBlocks + 1, keys, &err) == kBlocks - 1);
  CHECK_NO_ERROR(err);
  CHECK(kvtier_client_get(c, keys + KVTIER_BLOCK_KEY_SIZE, &len, &err) == NULL);
  CHECK_NO_ERROR(err);

  /* Stats of the tenant. */
  kvtier_stats_t* stats = kvtier_client_stats(c, &err);
  CHECK_NO_ERROR(err);
  CHECK(strcmp(kvtier_stats_tenant(stats), "acme") == 0);
  int found = 0;
  CHECK(kvtier_stats_get(stats, "puts", &found) == puts_before + 1 + kBlocks);
  CHECK(found == 1);
  CHECK(kvtier_stats_get(stats, "blocks", &found) == blocks_before + 1); /* `key` is left */
  kvtier_stats_get(stats, "no-such-counter", &found);
  CHECK(found == 0);
  CHECK(kvtier_stats_count(stats) > 5);
  CHECK(strcmp(kvtier_stats_name(stats, 0), "memory_budget_bytes") == 0);
  kvtier_stats_destroy(stats);

  for (int i = 0; i < kBlocks; ++i) free(values[i]);
  kvtier_put_options_destroy(po);
  kvtier_write_batch_destroy(batch);
  kvtier_client_close(c);
}

static void test_keys_from_tokens(const char* tcp) {
  char* err = NULL;
  /* docs/block_keys.md's test vector. */
  kvtier_namespace_t* ns = kvtier_namespace_create("acme", "llama-3.1-8b-instruct@0e9e39f");
  kvtier_namespace_set_layout(ns, 32, 8, 128, KVTIER_DTYPE_BF16, 4);
  uint32_t tokens[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  unsigned char keys[3 * KVTIER_BLOCK_KEY_SIZE];
  CHECK(kvtier_compute_block_keys(ns, tokens, 10, keys, 3, &err) == 2);
  CHECK_NO_ERROR(err);
  char hex[KVTIER_BLOCK_KEY_HEX_SIZE];
  kvtier_block_key_to_hex(keys, hex);
  CHECK(strcmp(hex, "1710bad8fce2903e92c90cdf5a919e7a29a32df64990441fe7fb500b2026ff33") == 0);
  kvtier_block_key_to_hex(keys + KVTIER_BLOCK_KEY_SIZE, hex);
  CHECK(strcmp(hex, "b2bd66f0ca3303edab5b38c445d3ea6d3b13cd3cb0e2d058d53c78932f40b36a") == 0);
  unsigned char parsed[KVTIER_BLOCK_KEY_SIZE];
  CHECK(kvtier_block_key_from_hex(hex, parsed, &err) == 1);
  CHECK_NO_ERROR(err);
  CHECK(memcmp(parsed, keys + KVTIER_BLOCK_KEY_SIZE, KVTIER_BLOCK_KEY_SIZE) == 0);
  CHECK(kvtier_block_key_from_hex("xyz", parsed, &err) == 0);
  CHECK_CONTAINS(err, "INVALID_ARGUMENT");
  kvtier_free(err);
  err = NULL;

  /* Store the first block; a prefix lookup from tokens finds 1 of the 2 full blocks. */
  kvtier_client_t* c = connect_as(tcp, "acme", "acme-token", &err);
  CHECK_NO_ERROR(err);
  kvtier_client_put(c, keys, "block-0", 7, NULL, &err);
  CHECK_NO_ERROR(err);
  unsigned char tiers[2] = {0, 0};
  CHECK(kvtier_client_lookup_prefix_tokens(c, ns, tokens, 10, tiers, 2, &err) == 1);
  CHECK_NO_ERROR(err);
  CHECK(tiers[0] == KVTIER_TIER_G2);

  /* An invalid namespace is an error, not a crash. */
  kvtier_namespace_t* bad = kvtier_namespace_create("", "m");
  CHECK(kvtier_compute_block_keys(bad, tokens, 10, keys, 3, &err) == 0);
  CHECK_CONTAINS(err, "tenant");
  kvtier_free(err);
  kvtier_namespace_destroy(bad);
  kvtier_namespace_destroy(ns);
  kvtier_client_close(c);
}

static void test_error_after_daemon_stops(daemon_t* d, const char* tcp) {
  char* err = NULL;
  kvtier_client_options_t* o = kvtier_client_options_create();
  kvtier_client_options_set_endpoint(o, tcp);
  kvtier_client_options_set_retry_timeout_ms(o, 0); /* The first UNAVAILABLE, not 10 s of retries. */
  kvtier_client_options_set_io_timeout_ms(o, 5000);
  kvtier_client_t* c = kvtier_client_connect(o, &err);
  kvtier_client_options_destroy(o);
  CHECK_NO_ERROR(err);
  daemon_stop(d);
  /* Same call as a miss above, but now it is an error: NULL with a message. */
  unsigned char key[KVTIER_BLOCK_KEY_SIZE];
  make_key(key, 1);
  size_t len = 5;
  char* v = kvtier_client_get(c, key, &len, &err);
  CHECK(v == NULL && len == 0);
  CHECK_CONTAINS(err, "UNAVAILABLE");
  kvtier_free(err);
  kvtier_client_close(c);
}

/* Session deletion and deleting all of a tenant's blocks (Store::DeleteSession/DeleteTenant). */
static void test_sessions(const char* tcp) {
  char* err = NULL;
  kvtier_client_t* c = connect_as(tcp, "acme", "acme-token", &err);
  CHECK_NO_ERROR(err);
  kvtier_client_t* other = connect_as(tcp, NULL, NULL, &err);
  CHECK_NO_ERROR(err);
  kvtier_put_options_t* po = kvtier_put_options_create();
  unsigned char keys[6 * KVTIER_BLOCK_KEY_SIZE];
  for (uint32_t i = 0; i < 6; ++i) {
    make_key(keys + i * KVTIER_BLOCK_KEY_SIZE, 700 + i);
    kvtier_put_options_set_session(po, i < 3 ? 11 : 12); /* 3 blocks in session 11, 3 in 12 */
    kvtier_client_put(c, keys + i * KVTIER_BLOCK_KEY_SIZE, "session-block", 13, po, &err);
    CHECK_NO_ERROR(err);
  }
  /* The other tenant's block with the same key and session survives everything below. */
  kvtier_put_options_set_session(po, 11);
  kvtier_client_put(other, keys, "other-tenant", 12, po, &err);
  CHECK_NO_ERROR(err);

  /* Hints: taken for the tenant's own sessions, refused with a reason otherwise. */
  kvtier_client_hint_session(c, 12, 30, 0, KVTIER_PRIORITY_HIGH, &err);
  CHECK_NO_ERROR(err);
  kvtier_client_hint_session(c, 12, 0, 0, KVTIER_PRIORITY_LOW, &err);
  CHECK_NO_ERROR(err);
  kvtier_client_hint_session(c, 12, 0, 0, 7, &err);
  CHECK_CONTAINS(err, "KVTIER_PRIORITY_");
  kvtier_client_hint_session(c, 12, 0, 0, KVTIER_PRIORITY_UNCHANGED, &err);
  CHECK_CONTAINS(err, "empty");
  kvtier_client_hint_session(c, 12, 10, 1, KVTIER_PRIORITY_UNCHANGED, &err);
  CHECK_CONTAINS(err, "INVALID_ARGUMENT");
  kvtier_client_hint_session(other, 12, 10, 0, KVTIER_PRIORITY_UNCHANGED, &err);
  CHECK_CONTAINS(err, "NOT_FOUND"); /* acme's session 12 is not the anonymous tenant's */
  kvtier_free(err);
  err = NULL;

  uint64_t memory_blocks = 99, disk_blocks = 99;
  kvtier_client_delete_session(c, 11, &memory_blocks, &disk_blocks, &err);
  CHECK_NO_ERROR(err);
  CHECK(memory_blocks == 3);
  unsigned char tiers[6];
  kvtier_client_exists(c, 6, keys, tiers, &err);
  CHECK_NO_ERROR(err);
  for (int i = 0; i < 6; ++i) CHECK(tiers[i] == (i < 3 ? KVTIER_TIER_ABSENT : KVTIER_TIER_G2));

  /* Session 0 means "no session": refused. */
  kvtier_client_delete_session(c, 0, &memory_blocks, &disk_blocks, &err);
  CHECK_CONTAINS(err, "INVALID_ARGUMENT");
  kvtier_free(err);
  err = NULL;

  /* Flush writes the three blocks left in G2 to G3, once: a second flush has nothing to do. */
  uint64_t written = 0;
  kvtier_client_flush(c, &written, &err);
  CHECK_NO_ERROR(err);
  CHECK(written == 3);
  kvtier_client_flush(c, &written, &err);
  CHECK_NO_ERROR(err);
  CHECK(written == 0);

  kvtier_client_delete_all_blocks(c, &memory_blocks, &disk_blocks, &err);
  CHECK_NO_ERROR(err);
  CHECK(memory_blocks == 3);
  CHECK(disk_blocks == 3);
  kvtier_client_exists(c, 6, keys, tiers, &err);
  CHECK_NO_ERROR(err);
  for (int i = 0; i < 6; ++i) CHECK(tiers[i] == KVTIER_TIER_ABSENT);

  size_t len = 0;
  char* v = kvtier_client_get(other, keys, &len, &err);
  CHECK_NO_ERROR(err);
  CHECK(v != NULL && len == 12 && memcmp(v, "other-tenant", 12) == 0);
  kvtier_free(v);
  kvtier_put_options_destroy(po);
  kvtier_client_close(other);
  kvtier_client_close(c);
}

/* State beside KV: a block with a recurrent state after it, stored in one atomic put; the resume
 * lookup finds it and not a length without its state. */
static void test_state(const char* tcp) {
  char* err = NULL;
  kvtier_client_t* c = connect_as(tcp, "acme", "acme-token", &err);
  CHECK_NO_ERROR(err);
  unsigned char keys[2 * KVTIER_BLOCK_KEY_SIZE], state[KVTIER_BLOCK_KEY_SIZE];
  make_key(keys, 900);
  make_key(keys + KVTIER_BLOCK_KEY_SIZE, 901);
  CHECK(kvtier_state_key(keys + KVTIER_BLOCK_KEY_SIZE, "mamba", state, &err) == 1);
  CHECK_NO_ERROR(err);
  CHECK(kvtier_state_key(keys, "not a name", state, &err) == 0);
  CHECK_CONTAINS(err, "state group name");
  kvtier_free(err);
  err = NULL;

  static char kv0[4096], kv1[4096], ssm[1024];
  fill(kv0, sizeof(kv0), 1);
  fill(kv1, sizeof(kv1), 2);
  fill(ssm, sizeof(ssm), 3);
  kvtier_write_batch_t* batch = kvtier_write_batch_create();
  kvtier_put_options_t* po = kvtier_put_options_create();
  kvtier_put_options_set_role(po, KVTIER_ROLE_KV_NEEDS_STATE);
  kvtier_write_batch_put(batch, keys, kv0, sizeof(kv0), po);
  kvtier_put_options_set_parent(po, keys);
  kvtier_write_batch_put(batch, keys + KVTIER_BLOCK_KEY_SIZE, kv1, sizeof(kv1), po);
  kvtier_put_options_set_parent(po, keys + KVTIER_BLOCK_KEY_SIZE);
  kvtier_put_options_set_role(po, KVTIER_ROLE_STATE);
  kvtier_write_batch_put(batch, state, ssm, sizeof(ssm), po);
  kvtier_client_put_atomic(c, batch, &err);
  CHECK_NO_ERROR(err);

  kvtier_resume_query_t* q = kvtier_resume_query_create(1);
  kvtier_resume_query_add_group(q, "mamba", 1);
  size_t kv_blocks = 0, num_resumable = 0;
  uint32_t resumable[2] = {0, 0};
  CHECK(kvtier_client_lookup_resume(c, 2, keys, q, &kv_blocks, resumable, &num_resumable, &err) ==
        2);
  CHECK_NO_ERROR(err);
  CHECK(kv_blocks == 2 && num_resumable == 1 && resumable[0] == 2);
  size_t got = 0;
  char* value = kvtier_client_get(c, state, &got, &err);
  CHECK(value != NULL && got == sizeof(ssm) && memcmp(value, ssm, got) == 0);
  kvtier_free(value);

  /* A state whose block was never stored: nothing of the batch is kept. */
  unsigned char lost[KVTIER_BLOCK_KEY_SIZE], orphan[KVTIER_BLOCK_KEY_SIZE];
  make_key(lost, 902);
  CHECK(kvtier_state_key(lost, "mamba", orphan, &err) == 1);
  kvtier_write_batch_clear(batch);
  kvtier_put_options_set_parent(po, lost);
  kvtier_write_batch_put(batch, orphan, ssm, sizeof(ssm), po);
  kvtier_client_put_atomic(c, batch, &err);
  CHECK_CONTAINS(err, "FAILED_PRECONDITION");
  kvtier_free(err);
  err = NULL;
  unsigned char tier = 9;
  kvtier_client_exists(c, 1, orphan, &tier, &err);
  CHECK_NO_ERROR(err);
  CHECK(tier == KVTIER_TIER_ABSENT);

  kvtier_resume_query_destroy(q);
  kvtier_put_options_destroy(po);
  kvtier_write_batch_destroy(batch);
  kvtier_client_close(c);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <kvtierd> basic|sessions\n", argv[0]);
    return 2;
  }
  daemon_t d;
  memset(&d, 0, sizeof(d));
  daemon_start(&d, argv[1]);
  char tcp[64];
  snprintf(tcp, sizeof(tcp), "127.0.0.1:%u", d.native_port);
  if (strcmp(argv[2], "basic") == 0) {
    test_errors_and_auth(&d, tcp);
    test_round_trips(tcp);
    test_keys_from_tokens(tcp);
    test_state(tcp);
    test_error_after_daemon_stops(&d, tcp);
  } else if (strcmp(argv[2], "sessions") == 0) {
    test_sessions(tcp);
  } else {
    fprintf(stderr, "unknown case %s\n", argv[2]);
    daemon_cleanup(&d);
    return 2;
  }
  daemon_cleanup(&d);
  printf("c_api_test %s: OK\n", argv[2]);
  return 0;
}
