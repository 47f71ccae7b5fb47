#include "src/server/config.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

ServerConfig Defaults() {
  ServerConfig c;
  Status s = ApplyConfigToml(kDefaultConfigToml, "default", &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

TEST(ConfigTest, EmbeddedDefaultServesLocalhostWithOneAnonymousTenant) {
  ServerConfig c = Defaults();
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.native_listen, "127.0.0.1:7380");
  EXPECT_EQ(c.resp_listen, "127.0.0.1:6380");
  EXPECT_EQ(c.http_listen, "127.0.0.1:7381");
  EXPECT_EQ(c.store.memory.capacity_bytes, kGiB);
  EXPECT_EQ(c.StoreOptions().disk.dir, "./kvtier-data/disk");
  EXPECT_EQ(c.store.disk.capacity_bytes, 16 * kGiB);
  ASSERT_EQ(c.tenants.size(), 1u);
  EXPECT_EQ(c.tenants[0].options.name, "default");
  EXPECT_EQ(c.anonymous_tenant, "default");
  EXPECT_FALSE(c.tls.enabled());  // TLS off by default: the listeners are on loopback.
}

TEST(ConfigTest, TlsSectionIsReadAndCheckedForConsistency) {
  ServerConfig c = Defaults();
  Status s = ApplyConfigToml(
      "[tls]\ncert_file = \"/etc/kvtier/cert.pem\"\nkey_file = \"/etc/kvtier/key.pem\"\n"
      "resp = true\n", "x.toml", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(c.tls.enabled());
  EXPECT_TRUE(c.tls.native);
  EXPECT_TRUE(c.tls.resp);
  EXPECT_FALSE(c.tls.http);
  EXPECT_TRUE(c.Validate().ok());
  c.tls.key_file.clear();
  EXPECT_NE(c.Validate().message().find("tls.key_file"), std::string_view::npos);
  c = Defaults();
  c.tls.require_client_cert = true;
  EXPECT_NE(c.Validate().message().find("tls.ca_file"), std::string_view::npos);
  s = ApplyConfigToml("[tls]\ncert = \"x\"\n", "x.toml", &c);
  EXPECT_NE(s.message().find("tls.cert"), std::string_view::npos) << s.ToString();
}

TEST(ConfigTest, EventsAreOffByDefaultAndTheirTableIsChecked) {
  ServerConfig c = Defaults();
  EXPECT_FALSE(c.events.enabled);
  EXPECT_EQ(c.events.endpoint, "tcp://127.0.0.1:5557");
  Status s = ApplyConfigToml("[events]\nenabled = true\nendpoint = \"ipc:///run/kv.sock\"\n"
                             "replay_endpoint = \"\"\nbatch_ms = 50\n", "x.toml", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(c.events.enabled);
  EXPECT_EQ(c.events.endpoint, "ipc:///run/kv.sock");
  EXPECT_EQ(c.events.batch_ms, 50u);
  EXPECT_TRUE(c.Validate().ok());
  c.events.endpoint = "";
  EXPECT_NE(c.Validate().message().find("events.endpoint"), std::string::npos);
  ServerConfig d = Defaults();
  s = ApplyConfigToml("[events]\nenable = true\n", "y.toml", &d);
  EXPECT_NE(s.message().find("events.enable"), std::string::npos) << s.ToString();
}

TEST(ConfigTest, FileOverridesOnlyWhatItSets) {
  ServerConfig c = Defaults();
  Status s = ApplyConfigToml(R"(
[memory]
capacity = "256MiB"
[disk]
dir = "disk"
capacity = 1073741824
[[tenants]]
name = "acme"
token = "t1"
memory_budget = "64MiB"
ttl_seconds = 3600
[auth]
anonymous_tenant = ""
)", "test.toml", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.store.memory.capacity_bytes, 256 * kMiB);
  EXPECT_EQ(c.resp_listen, "127.0.0.1:6380");
  ASSERT_EQ(c.tenants.size(), 1u);
  EXPECT_EQ(c.tenants[0].options.memory_budget_bytes, 64 * kMiB);
  EXPECT_EQ(c.tenants[0].options.ttl_seconds, 3600u);
  Options o = c.StoreOptions();
  EXPECT_EQ(o.disk.dir, "./kvtier-data/disk");
  EXPECT_EQ(o.disk.capacity_bytes, kGiB);
  ASSERT_EQ(o.tenants.size(), 1u);
  EXPECT_TRUE(c.Validate().ok());
}

TEST(ConfigTest, TyposAndBadValuesAreNamed) {
  ServerConfig c = Defaults();
  Status s = ApplyConfigToml("[memory]\ncapasity = 5\n", "x.toml", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("memory.capasity"), std::string_view::npos) << s.ToString();
  s = ApplyConfigToml("[server]\nthreads = \"four\"\n", "x.toml", &c);
  EXPECT_NE(s.message().find("server.threads"), std::string_view::npos) << s.ToString();
  s = ApplyConfigToml("[memory\n", "x.toml", &c);
  EXPECT_NE(s.message().find("x.toml:1"), std::string_view::npos) << s.ToString();
  s = ApplyConfigToml("[memory]\ncapacity = \"3 parsecs\"\n", "x.toml", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  // Enumerated values name every choice; a valid one is taken.
  s = ApplyConfigToml("[disk]\ndurability = \"fast\"\n", "x.toml", &c);
  EXPECT_NE(s.message().find("'disk.durability' must be \"written\" or \"synced\""),
            std::string_view::npos)
      << s.ToString();
  s = ApplyConfigToml("[shared]\nwrite_policy = \"later\"\n", "x.toml", &c);
  EXPECT_NE(s.message().find("'shared.write_policy' must be \"on_put\" or \"on_demotion\""),
            std::string_view::npos)
      << s.ToString();
  c = Defaults();
  ASSERT_TRUE(ApplyConfigToml(
                  "[disk]\ndurability = \"synced\"\n[shared]\nwrite_policy = \"on_put\"\n",
                  "x.toml", &c)
                  .ok());
  EXPECT_EQ(c.store.disk.durability, DiskTierOptions::Durability::kSynced);
  EXPECT_EQ(c.store.shared.write_policy, SharedTierOptions::WritePolicy::kOnPut);
  // A request deadline needs a rate to grow by.
  c = Defaults();
  ASSERT_TRUE(ApplyConfigToml("[server]\nmin_request_rate = 0\n", "x.toml", &c).ok());
  s = c.Validate();
  EXPECT_NE(s.message().find("server.min_request_rate"), std::string_view::npos) << s.ToString();
  c.request_timeout_seconds = 0;
  EXPECT_TRUE(c.Validate().ok());
  // Busy polling is off unless asked for, and bounded.
  c = Defaults();
  EXPECT_EQ(c.busy_poll_us, 0u);
  ASSERT_TRUE(ApplyConfigToml("[server]\nbusy_poll_us = 200\n", "x.toml", &c).ok());
  EXPECT_EQ(c.busy_poll_us, 200u);
  EXPECT_TRUE(c.Validate().ok());
  c.busy_poll_us = 2'000'000;
  EXPECT_NE(c.Validate().message().find("server.busy_poll_us"), std::string_view::npos);
}

TEST(ConfigTest, ValidateRejectsDuplicateTokensAndUnknownAnonymousTenant) {
  ServerConfig c = Defaults();
  auto tenant = [](const char* name, const char* token) {
    TenantConfig t;
    t.options.name = name;
    t.token = token;
    return t;
  };
  c.tenants.push_back(tenant("a", "same"));
  c.tenants.push_back(tenant("b", "same"));
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  c = Defaults();
  c.anonymous_tenant = "nobody";
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  // A tenant's admin token may not be a client token too, nor a uid belong to two tenants.
  c = Defaults();
  c.tenants.push_back(tenant("a", "client-token"));
  c.tenants.push_back(tenant("b", ""));
  c.tenants.back().admin_token = "client-token";
  EXPECT_NE(c.Validate().message().find("every token must be unique"), std::string::npos);
  c.tenants.back().admin_token = "";
  c.tenants[c.tenants.size() - 2].unix_uids = {1000};
  c.tenants.back().unix_uids = {1000};
  EXPECT_NE(c.Validate().message().find("uid 1000 is listed by two tenants"), std::string::npos);
}

TEST(ConfigTest, UnixPeersAndLockoutsAreRead) {
  ServerConfig c = Defaults();
  ASSERT_TRUE(ApplyConfigToml("[server]\nunix_socket_mode = \"0660\"\nunix_socket_group = \"0\"\n"
                              "[auth]\nmax_failures = 5\nlockout_seconds = 30\n"
                              "[[tenants]]\nname = \"engine\"\nunix_uids = [1000, \"root\"]\n"
                              "unix_gids = [\"root\"]\nadmin_token = \"engine-admin\"\n",
                              "x.toml", &c)
                  .ok());
  EXPECT_EQ(c.unix_socket_mode, "0660");
  EXPECT_EQ(c.auth_max_failures, 5u);
  EXPECT_EQ(c.auth_lockout_seconds, 30u);
  ASSERT_EQ(c.tenants.size(), 1u);
  EXPECT_EQ(c.tenants[0].unix_uids, (std::vector<uint32_t>{1000, 0}));
  EXPECT_EQ(c.tenants[0].unix_gids, (std::vector<uint32_t>{0}));
  EXPECT_EQ(c.tenants[0].admin_token, "engine-admin");
  Status s = ApplyConfigToml("[[tenants]]\nname = \"x\"\nunix_uids = [\"no-such-user-kvtier\"]\n",
                             "y.toml", &c);
  EXPECT_NE(s.message().find("'no-such-user-kvtier' is neither an id nor a known name"),
            std::string::npos)
      << s.ToString();
  c = Defaults();
  c.unix_socket_mode = "rw";
  EXPECT_NE(c.Validate().message().find("unix_socket_mode must be octal"), std::string::npos);
}

TEST(ConfigTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("64"), 64u);
  EXPECT_EQ(*ParseByteSize("4KiB"), 4096u);
  EXPECT_EQ(*ParseByteSize("2 MB"), 2000000u);
  EXPECT_EQ(*ParseByteSize("1g"), kGiB);
  EXPECT_FALSE(ParseByteSize("GiB").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999999999").ok());
  EXPECT_FALSE(ParseByteSize("16EiB").ok());
}

}  // namespace
}  // namespace kvtier::server
