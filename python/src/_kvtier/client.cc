// _Client: the C++ Client (include/kvtier/client.h) for Python. Arguments are converted with
// the GIL held, then every call that waits on kvtierd runs with the GIL released. Batch calls
// return one entry per item: a value, None (a miss, or OK for calls without a value) or an
// exception instance, which kvtier.Client turns into a raise.

#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "buffers.h"
#include "errors.h"
#include "kvtier/client.h"

namespace kvtier::python {
namespace {

py::list StatusList(const std::vector<Status>& statuses) {
  py::list out(statuses.size());
  for (size_t i = 0; i < statuses.size(); ++i) {
    out[i] = statuses[i].ok() ? py::none() : ErrorObject(statuses[i]);
  }
  return out;
}

py::dict DeletionDict(const DeletionReport& r) {
  py::dict d;
  d["memory_blocks"] = r.memory_blocks;
  d["disk_blocks"] = r.disk_blocks;
  d["shared_blocks"] = r.shared_blocks;
  return d;
}

}  // namespace

py::list SizeList(const std::vector<Result<size_t>>& results) {
  py::list out(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) {
      out[i] = py::int_(*results[i]);
    } else if (results[i].status().code() == StatusCode::kNotFound) {
      out[i] = py::none();
    } else {
      out[i] = ErrorObject(results[i].status());
    }
  }
  return out;
}

PutOptions PutOptionsFrom(py::handle parent, uint64_t session, uint32_t dtype, size_t index) {
  PutOptions o;
  if (!parent.is_none()) o.parent = KeyFrom(parent, index);
  o.session = session;
  if (dtype != 0) {
    if (dtype > static_cast<uint32_t>(KvDtype::kFp8E5M2)) {
      throw StatusError(Status::InvalidArgument("unknown dtype code " + std::to_string(dtype)));
    }
    o.dtype = static_cast<KvDtype>(dtype);
  }
  return o;
}

// An engine's block hash: an int of 0 to 2**64 - 1, or 1 to 32 bytes.
EngineHash EngineHashFrom(py::handle h, size_t index) {
  EngineHash out;
  const std::string where = "engine hash " + std::to_string(index);
  if (py::isinstance<py::int_>(h) && !py::isinstance<py::bool_>(h)) {
    py::int_ v = py::reinterpret_borrow<py::int_>(h);
    if (v < py::int_(0) || v >= (py::int_(1) << py::int_(64))) {
      throw StatusError(Status::InvalidArgument(where + " is an int outside 0 to 2**64 - 1"));
    }
    const uint64_t x = v.cast<uint64_t>();
    out.integer = true;
    out.size = 8;
    for (int i = 0; i < 8; ++i) out.bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(x >> (56 - 8 * i));
    return out;
  }
  if (!py::isinstance<py::bytes>(h)) {
    throw StatusError(Status::InvalidArgument(where + " is a " +
                                              std::string(py::str(h.get_type().attr("__name__"))) +
                                              "; use an int or bytes"));
  }
  const std::string b = h.cast<std::string>();
  if (b.empty() || b.size() > kBlockKeySize) {
    throw StatusError(Status::InvalidArgument(where + " has " + std::to_string(b.size()) +
                                              " bytes; 1 to 32 are allowed"));
  }
  out.size = static_cast<uint8_t>(b.size());
  std::memcpy(out.bytes.data(), b.data(), b.size());
  return out;
}

std::vector<BlockWrite> WritesFrom(const std::vector<BlockKey>& keys,
                                   const std::vector<BorrowedBytes>& values, py::handle parents,
                                   uint64_t session, uint32_t dtype, py::handle engine_hashes,
                                   py::handle roles) {
  if (values.size() != keys.size()) {
    throw StatusError(Status::InvalidArgument(std::to_string(keys.size()) + " keys but " +
                                              std::to_string(values.size()) + " values"));
  }
  std::optional<py::sequence> ps;
  if (!parents.is_none()) {
    ps = py::reinterpret_borrow<py::sequence>(parents);
    if (ps->size() != keys.size()) {
      throw StatusError(Status::InvalidArgument("one parent (or None) per key is needed"));
    }
  }
  std::optional<py::sequence> hs;
  if (!engine_hashes.is_none()) {
    hs = py::reinterpret_borrow<py::sequence>(engine_hashes);
    if (hs->size() != keys.size()) {
      throw StatusError(Status::InvalidArgument("one engine hash (or None) per key is needed"));
    }
  }
  std::optional<py::sequence> rs;
  if (!roles.is_none()) {
    rs = py::reinterpret_borrow<py::sequence>(roles);
    if (rs->size() != keys.size()) {
      throw StatusError(Status::InvalidArgument("one role per key is needed"));
    }
  }
  std::vector<BlockWrite> writes(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    py::object parent = ps ? py::object((*ps)[i]) : py::none();
    PutOptions o = PutOptionsFrom(parent, session, dtype, i);
    writes[i] = {keys[i], values[i].span(), o.parent, o.session, o.dtype};
    if (hs && !py::object((*hs)[i]).is_none()) writes[i].engine_hash = EngineHashFrom((*hs)[i], i);
    if (rs) {
      const int role = py::object((*rs)[i]).cast<int>();
      if (role < 0 || role > static_cast<int>(BlockRole::kState)) {
        throw StatusError(Status::InvalidArgument("unknown block role " + std::to_string(role)));
      }
      writes[i].role = static_cast<BlockRole>(role);
    }
  }
  return writes;
}

py::object TierObject(std::optional<TierLevel> tier) {
  if (!tier) return py::none();
  static py::object tier_class = py::module_::import("kvtier._types").attr("Tier");
  return tier_class(static_cast<int>(*tier));
}

void BindClient(py::module_& m) {
  py::class_<Closable<Client>, std::shared_ptr<Closable<Client>>>(m, "_Client")
      .def(py::init([](std::string endpoint, std::string tenant, std::string token,
                       std::string client_name, uint32_t connections, uint32_t retry_timeout_ms,
                       uint32_t io_timeout_ms, bool tls, std::string tls_ca_file, bool tls_verify,
                       std::string tls_server_name, std::string tls_cert_file,
                       std::string tls_key_file) {
             ClientOptions o;
             o.endpoint = std::move(endpoint);
             o.tenant = std::move(tenant);
             o.token = std::move(token);
             o.client_name = std::move(client_name);
             o.connections = connections;
             o.retry_timeout_ms = retry_timeout_ms;
             o.io_timeout_ms = io_timeout_ms;
             o.tls.enabled = tls;
             o.tls.ca_file = std::move(tls_ca_file);
             o.tls.verify_peer = tls_verify;
             o.tls.server_name = std::move(tls_server_name);
             o.tls.cert_file = std::move(tls_cert_file);
             o.tls.key_file = std::move(tls_key_file);
             Result<std::unique_ptr<Client>> c = [&] {
               py::gil_scoped_release release;
               return Client::Connect(o);
             }();
             return std::make_shared<Closable<Client>>(ValueOrThrow(std::move(c)));
           }),
           py::arg("endpoint"), py::arg("tenant"), py::arg("token"), py::arg("client_name"),
           py::arg("connections"), py::arg("retry_timeout_ms"), py::arg("io_timeout_ms"), py::arg("tls"),
           py::arg("tls_ca_file"), py::arg("tls_verify"), py::arg("tls_server_name"),
           py::arg("tls_cert_file"), py::arg("tls_key_file"))
      .def("close", &Closable<Client>::close)
      .def("server_info",
           [](Closable<Client>& box) {
             auto c = box.get();
             const ServerInfo& i = c->server_info();
             py::dict d;
             d["server"] = i.server;
             d["tenant"] = i.tenant;
             d["features"] = i.features;
             d["max_frame_bytes"] = i.max_frame_bytes;
             d["max_block_bytes"] = i.max_block_bytes;
             d["max_batch"] = i.max_batch;
             return d;
           })
      .def("ping",
           [](Closable<Client>& box) {
             auto c = box.get();
             Status s = WithoutGil([&] { return c->Ping(); });
             ThrowIfError(s);
           })
      .def("put_many",
           [](Closable<Client>& box, py::handle keys, py::handle values, py::handle parents,
              uint64_t session, uint32_t dtype, py::handle engine_hashes, py::handle roles) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             std::vector<BorrowedBytes> v = BorrowAll(values, false, "value");
             std::vector<BlockWrite> writes =
                 WritesFrom(k, v, parents, session, dtype, engine_hashes, roles);
             std::vector<Status> statuses = WithoutGil([&] { return c->PutMany(writes); });
             return StatusList(statuses);
           },
           py::arg("keys"), py::arg("values"), py::arg("parents"), py::arg("session"),
           py::arg("dtype"), py::arg("engine_hashes") = py::none(), py::arg("roles") = py::none())
      .def("put_atomic",
           [](Closable<Client>& box, py::handle keys, py::handle values, py::handle parents,
              uint64_t session, uint32_t dtype, py::handle roles) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             std::vector<BorrowedBytes> v = BorrowAll(values, false, "value");
             std::vector<BlockWrite> writes =
                 WritesFrom(k, v, parents, session, dtype, py::none(), roles);
             ThrowIfError(WithoutGil([&] { return c->PutAtomic(writes); }));
           },
           py::arg("keys"), py::arg("values"), py::arg("parents"), py::arg("session"),
           py::arg("dtype"), py::arg("roles"))
      .def("lookup_resume",
           [](Closable<Client>& box, py::handle keys, uint32_t keys_per_block,
              const std::vector<std::pair<std::string, uint32_t>>& groups, bool all_lengths) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             ResumeQuery q;
             q.keys_per_block = keys_per_block;
             for (const auto& [name, window] : groups) q.groups.push_back({name, window});
             q.all_lengths = all_lengths;
             Result<ResumeMatch> r = WithoutGil([&] { return c->LookupResume(k, q); });
             ResumeMatch m = ValueOrThrow(std::move(r));
             py::list tiers(m.tiers.size());
             for (size_t i = 0; i < m.tiers.size(); ++i) tiers[i] = TierObject(m.tiers[i]);
             py::dict d;
             d["kv_blocks"] = m.kv_blocks;
             d["resume_blocks"] = m.resume_blocks;
             d["tiers"] = tiers;
             d["resumable"] = m.resumable;
             d["group_blocks"] = m.group_blocks;
             return d;
           },
           py::arg("keys"), py::arg("keys_per_block"), py::arg("groups"), py::arg("all_lengths"))
      .def("get_many",
           [](Closable<Client>& box, py::handle keys) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             BlockValues values = WithoutGil([&] { return c->GetMany(k); });
             py::list out(k.size());
             for (size_t i = 0; i < k.size(); ++i) {
               const auto& v = values.values[i];
               if (v.ok()) {
                 out[i] = py::bytes(reinterpret_cast<const char*>(v->data()), v->size());
               } else if (v.status().code() == StatusCode::kNotFound) {
                 out[i] = py::none();
               } else {
                 out[i] = ErrorObject(v.status());
               }
             }
             return out;
           })
      .def("get_into",
           [](Closable<Client>& box, py::handle keys, py::handle buffers) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             std::vector<BorrowedBytes> b = BorrowAll(buffers, true, "buffer");
             if (b.size() != k.size()) {
               throw StatusError(Status::InvalidArgument(
                   std::to_string(k.size()) + " keys but " + std::to_string(b.size()) + " buffers"));
             }
             std::vector<std::span<std::byte>> outs;
             outs.reserve(b.size());
             for (const BorrowedBytes& x : b) outs.push_back(x.span());
             std::vector<Result<size_t>> got = WithoutGil([&] { return c->GetManyInto(k, outs); });
             return SizeList(got);
           })
      .def("exists_many",
           [](Closable<Client>& box, py::handle keys) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             Result<std::vector<std::optional<TierLevel>>> r = WithoutGil([&] { return c->Exists(k); });
             std::vector<std::optional<TierLevel>> tiers = ValueOrThrow(std::move(r));
             py::list out(tiers.size());
             for (size_t i = 0; i < tiers.size(); ++i) out[i] = TierObject(tiers[i]);
             return out;
           })
      .def("lookup_prefix",
           [](Closable<Client>& box, py::handle keys) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             Result<PrefixMatch> r = WithoutGil([&] { return c->LookupPrefix(k); });
             PrefixMatch match = ValueOrThrow(std::move(r));
             py::list tiers(match.tiers.size());
             for (size_t i = 0; i < match.tiers.size(); ++i) tiers[i] = TierObject(match.tiers[i]);
             return py::make_tuple(match.num_blocks, tiers);
           })
      .def("delete_many",
           [](Closable<Client>& box, py::handle keys) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             std::vector<Status> statuses = WithoutGil([&] { return c->DeleteMany(k); });
             py::list out(k.size());
             for (size_t i = 0; i < k.size(); ++i) {
               if (statuses[i].ok()) {
                 out[i] = py::bool_(true);
               } else if (statuses[i].code() == StatusCode::kNotFound) {
                 out[i] = py::bool_(false);
               } else {
                 out[i] = ErrorObject(statuses[i]);
               }
             }
             return out;
           })
      .def("pin_many",
           [](Closable<Client>& box, py::handle keys, bool pin) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             std::vector<Status> statuses = WithoutGil([&] { return pin ? c->PinMany(k) : c->UnpinMany(k); });
             return StatusList(statuses);
           })
      .def("prefetch",
           [](Closable<Client>& box, py::handle keys) {
             auto c = box.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             Status s = WithoutGil([&] { return c->Prefetch(k); });
             ThrowIfError(s);
           })
      .def("delete_session",
           [](Closable<Client>& box, uint64_t session) {
             auto c = box.get();
             Result<DeletionReport> r = WithoutGil([&] { return c->DeleteSession(session); });
             return DeletionDict(ValueOrThrow(std::move(r)));
           })
      .def("hint_session",
           [](Closable<Client>& box, uint64_t session, uint32_t retain_s, bool finished,
              std::optional<std::string> priority) {
             auto c = box.get();
             Store::SessionHint hint{retain_s, finished, std::nullopt};
             if (priority) {
               hint.priority = Store::ParseSessionPriority(*priority);
               if (!hint.priority) {
                 ThrowIfError(Status::InvalidArgument(
                     "priority '" + *priority + "' is not one of low, normal, high"));
               }
             }
             ThrowIfError(WithoutGil([&] { return c->HintSession(session, hint); }));
           })
      .def("delete_all",
           [](Closable<Client>& box) {
             auto c = box.get();
             Result<DeletionReport> r = WithoutGil([&] { return c->DeleteAllBlocks(); });
             return DeletionDict(ValueOrThrow(std::move(r)));
           })
      .def("flush",
           [](Closable<Client>& box) {
             auto c = box.get();
             Result<uint64_t> r = WithoutGil([&] { return c->Flush(); });
             return ValueOrThrow(std::move(r));
           })
      .def("stats", [](Closable<Client>& box) {
        auto c = box.get();
        Result<TenantStats> r = WithoutGil([&] { return c->Stats(); });
        TenantStats t = ValueOrThrow(std::move(r));
        py::dict d;
        d["tenant"] = t.name;
        for (const auto& [name, field] : TenantStats::kCounters) d[name] = t.*field;
        return d;
      });
}

}  // namespace kvtier::python
