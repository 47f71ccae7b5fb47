// Namespaces and block keys: the same bytes as the C++ library (docs/block_keys.md).

#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "buffers.h"
#include "errors.h"
#include "kvtier/state.h"

namespace kvtier::python {
namespace {

struct DtypeName {
  KvDtype dtype;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {KvDtype::kBf16, "bf16"},         {KvDtype::kFp16, "fp16"},         {KvDtype::kFp32, "fp32"},
    {KvDtype::kFp8E4M3, "fp8_e4m3"},  {KvDtype::kFp8E5M2, "fp8_e5m2"},
};

// "bf16", torch's "bfloat16" / torch.bfloat16, and so on.
KvDtype DtypeFrom(py::handle obj) {
  std::string s = py::str(obj);
  if (s.starts_with("torch.")) s = s.substr(6);
  if (s == "bfloat16") s = "bf16";
  if (s == "float16" || s == "half") s = "fp16";
  if (s == "float32" || s == "float") s = "fp32";
  if (s == "float8_e4m3fn") s = "fp8_e4m3";
  if (s == "float8_e5m2") s = "fp8_e5m2";
  for (const DtypeName& d : kDtypes) {
    if (s == d.name) return d.dtype;
  }
  throw StatusError(Status::InvalidArgument(
      "unknown KV dtype '" + std::string(py::str(obj)) +
      "'; use bf16, fp16, fp32, fp8_e4m3 or fp8_e5m2 (or the torch dtype)"));
}

std::string DtypeString(KvDtype dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "unknown";
}

// An engine's own block hash as bytes: a bytes-like object, a str (UTF-8), or an int that fits
// 64 bits (8 bytes, little-endian, two's complement when negative).
std::string EngineHashBytes(py::handle h) {
  if (PyLong_Check(h.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    uint64_t u = static_cast<uint64_t>(v);
    if (overflow > 0) {
      u = PyLong_AsUnsignedLongLong(h.ptr());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw StatusError(Status::InvalidArgument("an int engine hash must fit in 64 bits"));
      }
    } else if (overflow < 0) {
      throw StatusError(Status::InvalidArgument("an int engine hash must fit in 64 bits"));
    }
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((u >> (8 * i)) & 0xff);
    return out;
  }
  if (PyUnicode_Check(h.ptr())) return h.cast<std::string>();
  BorrowedBytes b(h, false, "engine hash");
  return std::string(reinterpret_cast<const char*>(b.span().data()), b.span().size());
}

}  // namespace

void BindKeys(py::module_& m) {
  py::class_<Namespace>(m, "Namespace", R"doc(
Everything that must match for two KV blocks to be interchangeable: the tenant, the model
fingerprint (name plus weights revision, e.g. "llama-3.1-8b@0e9e39f"), the KV layout and the
tensor-parallel position. Blocks of different namespaces never share keys.

dtype is "bf16", "fp16", "fp32", "fp8_e4m3" or "fp8_e5m2" (torch dtypes are accepted too).
Raises kvtier.InvalidArgument for a field out of range.)doc")
      .def(py::init([](std::string tenant, std::string model, uint32_t num_layers,
                       uint32_t num_kv_heads, uint32_t head_dim, py::object dtype,
                       uint32_t tokens_per_block, uint32_t tp_rank, uint32_t tp_size) {
             Namespace ns;
             ns.tenant = std::move(tenant);
             ns.model = std::move(model);
             ns.layout = {num_layers, num_kv_heads, head_dim, DtypeFrom(dtype), tokens_per_block};
             ns.tp_rank = tp_rank;
             ns.tp_size = tp_size;
             ThrowIfError(ns.Validate());
             return ns;
           }),
           py::arg("tenant"), py::arg("model"), py::kw_only(), py::arg("num_layers"),
           py::arg("num_kv_heads"), py::arg("head_dim"), py::arg("dtype") = "bf16",
           py::arg("tokens_per_block") = 256, py::arg("tp_rank") = 0, py::arg("tp_size") = 1)
      .def_property_readonly("tenant", [](const Namespace& ns) { return ns.tenant; })
      .def_property_readonly("model", [](const Namespace& ns) { return ns.model; })
      .def_property_readonly("num_layers", [](const Namespace& ns) { return ns.layout.num_layers; })
      .def_property_readonly("num_kv_heads", [](const Namespace& ns) { return ns.layout.num_kv_heads; })
      .def_property_readonly("head_dim", [](const Namespace& ns) { return ns.layout.head_dim; })
      .def_property_readonly("dtype", [](const Namespace& ns) { return DtypeString(ns.layout.dtype); })
      .def_property_readonly("tokens_per_block",
                             [](const Namespace& ns) { return ns.layout.tokens_per_block; })
      .def_property_readonly("tp_rank", [](const Namespace& ns) { return ns.tp_rank; })
      .def_property_readonly("tp_size", [](const Namespace& ns) { return ns.tp_size; })
      .def_property_readonly(
          "block_bytes", [](const Namespace& ns) { return ns.layout.BlockBytes(); },
          "Bytes of K and V in one block of this layout.")
      .def_property_readonly(
          "seed", [](const Namespace& ns) { return KeyBytes(ValueOrThrow(NamespaceSeed(ns))); },
          "The 32-byte seed of the namespace's key chain.")
      .def("__eq__",
           [](const Namespace& a, const Namespace& b) {
             return ValueOrThrow(NamespaceSeed(a)) == ValueOrThrow(NamespaceSeed(b));
           },
           py::is_operator())
      .def("__hash__",
           [](const Namespace& ns) { return static_cast<size_t>(ValueOrThrow(NamespaceSeed(ns)).Hash64()); })
      .def("__repr__",
           [](const Namespace& ns) {
             return "Namespace(tenant=" + std::string(py::repr(py::str(ns.tenant))) +
                    ", model=" + std::string(py::repr(py::str(ns.model))) +
                    ", num_layers=" + std::to_string(ns.layout.num_layers) +
                    ", num_kv_heads=" + std::to_string(ns.layout.num_kv_heads) +
                    ", head_dim=" + std::to_string(ns.layout.head_dim) + ", dtype='" +
                    DtypeString(ns.layout.dtype) +
                    "', tokens_per_block=" + std::to_string(ns.layout.tokens_per_block) +
                    ", tp_rank=" + std::to_string(ns.tp_rank) +
                    ", tp_size=" + std::to_string(ns.tp_size) + ")";
           })
      .def(py::pickle(
          [](const Namespace& ns) {
            return py::make_tuple(ns.tenant, ns.model, ns.layout.num_layers, ns.layout.num_kv_heads,
                                  ns.layout.head_dim, static_cast<int>(ns.layout.dtype),
                                  ns.layout.tokens_per_block, ns.tp_rank, ns.tp_size);
          },
          [](const py::tuple& t) {
            Namespace ns;
            ns.tenant = t[0].cast<std::string>();
            ns.model = t[1].cast<std::string>();
            ns.layout = {t[2].cast<uint32_t>(), t[3].cast<uint32_t>(), t[4].cast<uint32_t>(),
                         static_cast<KvDtype>(t[5].cast<int>()), t[6].cast<uint32_t>()};
            ns.tp_rank = t[7].cast<uint32_t>();
            ns.tp_size = t[8].cast<uint32_t>();
            ThrowIfError(ns.Validate());
            return ns;
          }));

  m.def(
      "block_keys",
      [](const Namespace& ns, py::handle tokens) {
        std::vector<uint32_t> ids = TokensFrom(tokens);
        std::vector<BlockKey> keys;
        {
          py::gil_scoped_release release;
          keys = ValueOrThrow(ComputeBlockKeys(ns, ids));
        }
        py::list out(keys.size());
        for (size_t i = 0; i < keys.size(); ++i) out[i] = KeyBytes(keys[i]);
        return out;
      },
      py::arg("namespace"), py::arg("tokens"));
  m.def(
      "opaque_key",
      [](const Namespace& ns, py::handle engine_hash) {
        std::string h = EngineHashBytes(engine_hash);
        return KeyBytes(ValueOrThrow(OpaqueBlockKey(
            ns, std::span(reinterpret_cast<const uint8_t*>(h.data()), h.size()))));
      },
      py::arg("namespace"), py::arg("engine_hash"));
  m.def(
      "named_key",
      [](py::handle name) {
        if (PyUnicode_Check(name.ptr())) return KeyBytes(NamedBlockKey(name.cast<std::string>()));
        BorrowedBytes b(name, false, "name");
        return KeyBytes(NamedBlockKey(
            std::string_view(reinterpret_cast<const char*>(b.span().data()), b.span().size())));
      },
      py::arg("name"));
  m.def(
      "state_key",
      [](py::handle block_key, const std::string& group) {
        return KeyBytes(ValueOrThrow(StateKey(KeyFrom(block_key, 0), group)));
      },
      py::arg("block_key"), py::arg("group"));
  m.def("dtype_code", [](py::handle dtype) { return static_cast<int>(DtypeFrom(dtype)); },
        py::arg("dtype"));
}

}  // namespace kvtier::python
