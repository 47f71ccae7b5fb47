// _ShmClient: the shared-memory fast path (include/kvtier/shm_client.h) for Python. Leased
// blocks and allocations are handed out as memoryviews straight into the mapped G2 arena, made
// from _ArenaPiece exporters that keep the lease (or allocation) alive while any view of them
// exists; it ends only when no view of it is exported, and exports nothing afterwards: a view
// never reaches memory kvtierd reused, and a committed block is never written.

#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "buffers.h"
#include "errors.h"
#include "kvtier/shm_client.h"

namespace kvtier::python {
namespace {

// What the views of one lease or allocation share: whether it has ended, and how many buffer
// exports of it are alive (a memoryview and everything made from it count as one).
struct ExportState {
  bool ended = false;    // Touched with the GIL held only, as `exports`.
  int64_t exports = 0;
};

struct LeaseState : ExportState {
  ShmBlocks blocks;
};

struct AllocationState : ExportState {
  ShmAllocation allocation;
};

struct BufferState : ExportState {
  ShmBuffer buffer;
};

// The exporter behind each memoryview: a small Python type with the buffer protocol, so that
// every export and release is counted (pybind11's def_buffer cannot fail an export, nor see
// its release).
struct ArenaPiece {
  PyObject_HEAD
  std::shared_ptr<ExportState>* state;
  std::byte* data;
  Py_ssize_t size;
  int readonly;
};

int PieceGetBuffer(PyObject* self, Py_buffer* view, int flags) {
  auto* p = reinterpret_cast<ArenaPiece*>(self);
  if ((*p->state)->ended) {
    PyErr_SetString(PyExc_BufferError, "the lease or allocation of this memory has ended");
    view->obj = nullptr;
    return -1;
  }
  if (PyBuffer_FillInfo(view, self, p->data, p->size, p->readonly, flags) != 0) return -1;
  ++(*p->state)->exports;
  return 0;
}

void PieceReleaseBuffer(PyObject* self, Py_buffer*) {
  --(*reinterpret_cast<ArenaPiece*>(self)->state)->exports;
}

void PieceDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  delete reinterpret_cast<ArenaPiece*>(self)->state;
  type->tp_free(self);
  Py_DECREF(type);
}

PyTypeObject* PieceType() {
  static PyTypeObject* type = [] {
    static PyType_Slot slots[] = {
        {Py_bf_getbuffer, reinterpret_cast<void*>(PieceGetBuffer)},
        {Py_bf_releasebuffer, reinterpret_cast<void*>(PieceReleaseBuffer)},
        {Py_tp_dealloc, reinterpret_cast<void*>(PieceDealloc)},
        {0, nullptr},
    };
    static PyType_Spec spec = {"kvtier._kvtier._ArenaPiece", sizeof(ArenaPiece), 0, Py_TPFLAGS_DEFAULT, slots};
    PyObject* t = PyType_FromSpec(&spec);
    if (t == nullptr) throw py::error_already_set();
    return reinterpret_cast<PyTypeObject*>(t);
  }();
  return type;
}

py::list Views(std::shared_ptr<ExportState> state, const std::vector<std::span<std::byte>>& pieces,
               bool readonly) {
  py::list out;
  for (std::span<std::byte> p : pieces) {
    PyTypeObject* type = PieceType();
    auto* piece = reinterpret_cast<ArenaPiece*>(type->tp_alloc(type, 0));
    if (piece == nullptr) throw py::error_already_set();
    piece->state = new std::shared_ptr<ExportState>(state);
    piece->data = p.data();
    piece->size = static_cast<Py_ssize_t>(p.size());
    piece->readonly = readonly ? 1 : 0;
    py::object owner = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(piece));
    out.append(py::reinterpret_steal<py::object>(PyMemoryView_FromObject(owner.ptr())));
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  return out;
}

// Ends a lease or allocation: BufferError while a view of it is still exported.
bool Ending(ExportState& s, const char* what) {
  if (s.ended) return false;
  if (s.exports > 0) {
    throw py::buffer_error(std::string("a view of this ") + what +
                           " is still in use (a memoryview, a slice of one or an array made from "
                           "it): release it first");
  }
  s.ended = true;
  return true;
}

}  // namespace

void BindShm(py::module_& m) {
  py::class_<LeaseState, std::shared_ptr<LeaseState>>(m, "_ShmLease")
      .def("__len__", [](const LeaseState& l) { return l.blocks.size(); })
      .def("status",
           [](const LeaseState& l, size_t i) -> py::object {
             if (i >= l.blocks.size()) throw py::index_error("no such block");
             const Status& s = l.blocks.status(i);
             return s.ok() ? py::none() : ErrorObject(s);
           })
      .def("size",
           [](const LeaseState& l, size_t i) {
             if (i >= l.blocks.size() || !l.blocks.status(i).ok()) throw py::index_error("no such block");
             return l.blocks.block_size(i);
           })
      .def("views",
           [](std::shared_ptr<LeaseState> l, size_t i) {
             if (l->ended) throw StatusError(Status::FailedPrecondition("the lease was released"));
             if (i >= l->blocks.size() || !l->blocks.status(i).ok()) throw py::index_error("no such block");
             std::vector<std::span<std::byte>> pieces;
             for (std::span<const std::byte> p : l->blocks.pieces(i)) {
               pieces.emplace_back(const_cast<std::byte*>(p.data()), p.size());
             }
             return Views(l, pieces, true);
           })
      .def_property_readonly("released", [](const LeaseState& l) { return l.ended; })
      .def_property_readonly("valid", [](const LeaseState& l) { return !l.ended && l.blocks.Valid(); })
      .def("release", [](LeaseState& l) {
        if (Ending(l, "lease")) l.blocks.Release();
      });

  py::class_<AllocationState, std::shared_ptr<AllocationState>>(m, "_ShmAllocation")
      .def_property_readonly("size", [](const AllocationState& a) { return a.allocation.size(); })
      .def_property_readonly("ended", [](const AllocationState& a) { return a.ended; })
      .def("views",
           [](std::shared_ptr<AllocationState> a) {
             if (a->ended) throw StatusError(Status::FailedPrecondition("the allocation was committed or aborted"));
             return Views(a, a->allocation.pieces(), false);
           })
      .def("abort", [](AllocationState& a) {
        if (Ending(a, "allocation")) a.allocation.Abort();
      });

  py::class_<BufferState, std::shared_ptr<BufferState>>(m, "_ShmBuffer")
      .def_property_readonly("size", [](const BufferState& b) { return b.buffer.data().size(); })
      .def_property_readonly("released", [](const BufferState& b) { return b.ended; })
      .def_property_readonly("valid", [](const BufferState& b) { return !b.ended && b.buffer.Valid(); })
      .def("view",
           [](std::shared_ptr<BufferState> b) {
             if (b->ended) throw StatusError(Status::FailedPrecondition("the staging buffer was released"));
             py::list views = Views(b, {b->buffer.data()}, false);
             return py::object(views[0]);
           })
      .def("release", [](BufferState& b) {
        if (Ending(b, "staging buffer")) b.buffer.Release();
      });

  py::class_<Closable<ShmClient>, std::shared_ptr<Closable<ShmClient>>>(m, "_ShmClient")
      .def(py::init([](std::string socket_path, std::string tenant, std::string token,
                       std::string client_name, bool populate, uint32_t retry_timeout_ms) {
             ShmClientOptions o;
             o.retry_timeout_ms = retry_timeout_ms;
             o.socket_path = std::move(socket_path);
             o.tenant = std::move(tenant);
             o.token = std::move(token);
             o.client_name = std::move(client_name);
             o.populate = populate;
             auto c = WithoutGil([&] { return ShmClient::Connect(o); });
             return std::make_shared<Closable<ShmClient>>(ValueOrThrow(std::move(c)));
           }),
           py::arg("socket_path"), py::arg("tenant"), py::arg("token"), py::arg("client_name"),
           py::arg("populate"), py::arg("retry_timeout_ms"))
      .def("close", &Closable<ShmClient>::close)
      .def_property_readonly("arena_size", [](Closable<ShmClient>& b) { return b.get()->arena_size(); })
      .def_property_readonly("max_leases", [](Closable<ShmClient>& b) { return b.get()->max_leases(); })
      .def_property_readonly("max_allocations", [](Closable<ShmClient>& b) { return b.get()->max_allocations(); })
      .def_property_readonly("tenant", [](Closable<ShmClient>& b) { return b.get()->tenant(); })
      .def("get",
           [](Closable<ShmClient>& b, py::handle keys) {
             auto c = b.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             if (k.size() > c->max_leases()) {
               throw StatusError(Status::InvalidArgument(
                   "at most " + std::to_string(c->max_leases()) + " keys per lease"));
             }
             Result<ShmBlocks> got = WithoutGil([&] { return c->Get(k); });
             auto state = std::make_shared<LeaseState>();
             state->blocks = ValueOrThrow(std::move(got));
             return state;
           })
      .def("get_into",
           [](Closable<ShmClient>& b, py::handle keys, py::handle buffers) {
             auto c = b.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             std::vector<BorrowedBytes> bufs = BorrowAll(buffers, true, "buffer");
             if (bufs.size() != k.size()) {
               throw StatusError(Status::InvalidArgument(std::to_string(k.size()) + " keys but " +
                                                         std::to_string(bufs.size()) + " buffers"));
             }
             std::vector<std::span<std::byte>> outs;
             for (BorrowedBytes& buf : bufs) outs.push_back(buf.span());
             std::vector<Result<size_t>> got = WithoutGil([&] { return c->ReadMany(k, outs); });
             return SizeList(got);
           })
      .def("put_many",
           [](Closable<ShmClient>& b, py::handle keys, py::handle values, py::handle parents, uint64_t session,
              uint32_t dtype) {
             auto c = b.get();
             std::vector<BlockKey> k = KeysFrom(keys);
             std::vector<BorrowedBytes> v = BorrowAll(values, false, "value");
             std::vector<BlockWrite> writes = WritesFrom(k, v, parents, session, dtype);
             std::vector<Status> statuses = WithoutGil([&] { return c->PutMany(writes); });
             py::list out(statuses.size());
             for (size_t i = 0; i < statuses.size(); ++i) {
               out[i] = statuses[i].ok() ? py::none() : ErrorObject(statuses[i]);
             }
             return out;
           })
      .def("allocate",
           [](Closable<ShmClient>& b, py::handle key, size_t size, py::handle parent, uint64_t session,
              uint32_t dtype) -> py::object {
             auto c = b.get();
             BlockKey k = KeyFrom(key, 0);
             PutOptions o = PutOptionsFrom(parent, session, dtype, 0);
             Result<ShmAllocation> a = WithoutGil([&] { return c->Allocate(k, size, o); });
             if (!a.ok() && a.status().code() == StatusCode::kAlreadyExists) return py::none();
             auto state = std::make_shared<AllocationState>();
             state->allocation = ValueOrThrow(std::move(a));
             return py::cast(state);
           })
      .def("commit",
           [](Closable<ShmClient>& b, AllocationState& a) {
             auto c = b.get();
             if (!Ending(a, "allocation")) {
               throw StatusError(Status::FailedPrecondition("the allocation was committed or aborted"));
             }
             ShmAllocation allocation = std::move(a.allocation);
             Status s = WithoutGil([&] { return c->Commit(std::move(allocation)); });
             ThrowIfError(s);
           })
      .def("staging_buffer",
           [](Closable<ShmClient>& b, size_t size) {
             auto c = b.get();
             Result<ShmBuffer> buffer = WithoutGil([&] { return c->StagingBuffer(size); });
             auto state = std::make_shared<BufferState>();
             state->buffer = ValueOrThrow(std::move(buffer));
             return state;
           })
      .def("flush", [](Closable<ShmClient>& b) {
        auto c = b.get();
        ThrowIfError(WithoutGil([&] { return c->Flush(); }));
      });
}

}  // namespace kvtier::python
