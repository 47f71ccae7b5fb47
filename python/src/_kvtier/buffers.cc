#include "buffers.h"

#include <cstring>
#include <utility>

#include "errors.h"

namespace kvtier::python {
namespace {

[[noreturn]] void Invalid(const std::string& message) {
  throw StatusError(Status::InvalidArgument(message));
}

std::string PendingErrorText() {
  py::error_already_set e;
  return py::str(e.value());
}

bool LooksLikeTensor(py::handle obj) {
  return py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_contiguous") &&
         py::hasattr(obj, "device") && py::hasattr(obj, "nbytes");
}

}  // namespace

BorrowedBytes::BorrowedBytes(py::handle obj, bool writable, const std::string& what) {
  if (PyObject_CheckBuffer(obj.ptr())) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      std::string reason = PendingErrorText();
      if (writable && PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) == 0) {
        PyBuffer_Release(&view_);
        Invalid(what + " is read-only; a writable buffer is needed");
      }
      PyErr_Clear();
      Invalid(what + " is not one contiguous buffer (" + reason + ")");
    }
    has_view_ = true;
    data_ = static_cast<std::byte*>(view_.buf);
    size_ = static_cast<size_t>(view_.len);
    return;
  }
  if (LooksLikeTensor(obj)) {
    std::string device = py::str(obj.attr("device"));
    if (obj.attr("device").attr("type").cast<std::string>() != "cpu") {
      Invalid(what + " is a tensor on " + device +
              "; kvtier reads and writes host memory: use a CPU (pinned) tensor");
    }
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      Invalid(what + " is a non-contiguous tensor; call .contiguous() first");
    }
    tensor_ = py::reinterpret_borrow<py::object>(obj);
    data_ = reinterpret_cast<std::byte*>(obj.attr("data_ptr")().cast<uintptr_t>());
    size_ = obj.attr("nbytes").cast<size_t>();
    return;
  }
  Invalid(what + " is a " + std::string(py::str(obj.get_type().attr("__name__"))) +
          ", not a buffer (bytes, bytearray, memoryview, numpy array or CPU torch tensor)");
}

BorrowedBytes::BorrowedBytes(BorrowedBytes&& other) noexcept
    : view_(other.view_),
      has_view_(std::exchange(other.has_view_, false)),
      tensor_(std::move(other.tensor_)),
      data_(other.data_),
      size_(other.size_) {}

BorrowedBytes::~BorrowedBytes() {
  if (has_view_) PyBuffer_Release(&view_);
}

std::vector<BorrowedBytes> BorrowAll(py::handle seq, bool writable, const std::string& what) {
  std::vector<BorrowedBytes> out;
  py::sequence items = py::reinterpret_borrow<py::sequence>(seq);
  out.reserve(items.size());
  size_t i = 0;
  for (py::handle item : items) out.emplace_back(item, writable, what + " " + std::to_string(i++));
  return out;
}

BlockKey KeyFrom(py::handle obj, size_t index) {
  const char* data = nullptr;
  Py_ssize_t size = -1;
  Py_buffer view{};
  bool has_view = false;
  if (PyBytes_Check(obj.ptr())) {
    data = PyBytes_AS_STRING(obj.ptr());
    size = PyBytes_GET_SIZE(obj.ptr());
  } else if (PyObject_CheckBuffer(obj.ptr()) && PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS) == 0) {
    has_view = true;
    data = static_cast<const char*>(view.buf);
    size = view.len;
  } else {
    PyErr_Clear();
  }
  if (size != static_cast<Py_ssize_t>(kBlockKeySize)) {
    if (has_view) PyBuffer_Release(&view);
    std::string got = size < 0 ? "a " + std::string(py::str(obj.get_type().attr("__name__")))
                               : std::to_string(size) + " bytes";
    Invalid("key " + std::to_string(index) + " is " + got +
            "; kvtier keys are 32 bytes (see kvtier.block_keys and kvtier.opaque_key)");
  }
  std::array<uint8_t, kBlockKeySize> bytes;
  std::memcpy(bytes.data(), data, kBlockKeySize);
  if (has_view) PyBuffer_Release(&view);
  return BlockKey(bytes);
}

std::vector<BlockKey> KeysFrom(py::handle seq) {
  if (PyBytes_Check(seq.ptr()) || PyUnicode_Check(seq.ptr()) || !PySequence_Check(seq.ptr())) {
    Invalid("keys must be a sequence of 32-byte keys, not one " +
            std::string(py::str(seq.get_type().attr("__name__"))));
  }
  py::sequence items = py::reinterpret_borrow<py::sequence>(seq);
  std::vector<BlockKey> keys;
  keys.reserve(items.size());
  size_t i = 0;
  for (py::handle item : items) keys.push_back(KeyFrom(item, i++));
  return keys;
}

std::vector<uint32_t> TokensFrom(py::handle obj) {
  auto check = [](long long v, size_t i) {
    if (v < 0 || v > static_cast<long long>(UINT32_MAX)) {
      Invalid("token " + std::to_string(i) + " is " + std::to_string(v) +
              "; token ids are 0 to 4294967295");
    }
    return static_cast<uint32_t>(v);
  };
  std::vector<uint32_t> tokens;
  Py_buffer view{};
  if (PyObject_CheckBuffer(obj.ptr()) && PyObject_GetBuffer(obj.ptr(), &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
    std::string format = view.format != nullptr ? view.format : "B";
    if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) format = format.substr(1);
    size_t n = view.itemsize > 0 ? static_cast<size_t>(view.len / view.itemsize) : 0;
    tokens.reserve(n);
    bool known = true;
    for (size_t i = 0; i < n && known; ++i) {
      const char* p = static_cast<const char*>(view.buf) + i * static_cast<size_t>(view.itemsize);
      long long v = 0;
      if (format == "I" && view.itemsize == 4) {
        uint32_t u;
        std::memcpy(&u, p, 4);
        v = u;
      } else if (format == "i" && view.itemsize == 4) {
        int32_t s;
        std::memcpy(&s, p, 4);
        v = s;
      } else if ((format == "q" || format == "l") && view.itemsize == 8) {
        int64_t s;
        std::memcpy(&s, p, 8);
        v = s;
      } else if ((format == "Q" || format == "L") && view.itemsize == 8) {
        uint64_t u;
        std::memcpy(&u, p, 8);
        v = u > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<long long>(u);
      } else {
        known = false;
        break;
      }
      tokens.push_back(check(v, i));
    }
    PyBuffer_Release(&view);
    if (known) return tokens;
    Invalid("tokens must be integers (a buffer of format '" + format +
            "' was given: use uint32, int32 or int64)");
  }
  PyErr_Clear();
  if (PyBytes_Check(obj.ptr()) || PyUnicode_Check(obj.ptr()) || !PySequence_Check(obj.ptr())) {
    Invalid("tokens must be a sequence of token ids");
  }
  py::sequence items = py::reinterpret_borrow<py::sequence>(obj);
  tokens.reserve(items.size());
  size_t i = 0;
  for (py::handle item : items) {
    long long v = PyLong_AsLongLong(item.ptr());
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      Invalid("token " + std::to_string(i) + " is not an integer token id");
    }
    tokens.push_back(check(v, i++));
  }
  return tokens;
}

}  // namespace kvtier::python
