// Status values in Python: each StatusCode raises its own exception class, a subclass of
// kvtier.Error defined in kvtier/_errors.py and registered with the extension at import.

#ifndef KVTIER_PYTHON_ERRORS_H_
#define KVTIER_PYTHON_ERRORS_H_

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>

#include "kvtier/status.h"

namespace kvtier::python {

namespace py = pybind11;

// Thrown by the binding (with the GIL held or not) and raised in Python as the class of its code.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)), what_(status_.ToString()) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Status status_;
  std::string what_;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

template <typename T>
T ValueOrThrow(Result<T> r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

// An instance (not raised) of the exception class of `s`, for per-item results. REQUIRES: GIL.
py::object ErrorObject(const Status& s);

// Defines _register_errors and the translation of StatusError.
void BindErrors(py::module_& m);

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_ERRORS_H_
