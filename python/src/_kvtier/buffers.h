// Bytes borrowed from Python objects for the length of a call, without copying them: anything
// with the buffer protocol (bytes, bytearray, memoryview, numpy arrays, mmap) and CPU torch
// tensors (pinned or not), which have no buffer protocol but expose data_ptr() and nbytes.
// Also the key and token arguments of the binding.

#ifndef KVTIER_PYTHON_BUFFERS_H_
#define KVTIER_PYTHON_BUFFERS_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"

namespace kvtier::python {

namespace py = pybind11;

// A contiguous byte range of a Python object, kept valid (exported, or the tensor referenced)
// while this object lives. Construction throws InvalidArgument (StatusError) naming `what` for
// an object that is not contiguous, not in host memory, or read-only when `writable`.
// REQUIRES: the GIL, for construction and destruction; span() may be used without it.
class BorrowedBytes {
 public:
  BorrowedBytes(py::handle obj, bool writable, const std::string& what);
  BorrowedBytes(BorrowedBytes&& other) noexcept;
  BorrowedBytes& operator=(BorrowedBytes&&) = delete;
  BorrowedBytes(const BorrowedBytes&) = delete;
  ~BorrowedBytes();

  std::span<std::byte> span() const { return {data_, size_}; }

 private:
  Py_buffer view_{};
  bool has_view_ = false;
  py::object tensor_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// One BorrowedBytes per item of a sequence; InvalidArgument names the item ("<what> 3").
std::vector<BorrowedBytes> BorrowAll(py::handle seq, bool writable, const std::string& what);

// A 32-byte key from a bytes-like object; InvalidArgument naming item `index` otherwise.
BlockKey KeyFrom(py::handle obj, size_t index);
std::vector<BlockKey> KeysFrom(py::handle seq);

// Token ids (0 to 2^32-1) from a sequence of ints or a buffer of integers (numpy, array).
std::vector<uint32_t> TokensFrom(py::handle obj);

inline py::bytes KeyBytes(const BlockKey& key) {
  return py::bytes(reinterpret_cast<const char*>(key.data()), kBlockKeySize);
}

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_BUFFERS_H_
