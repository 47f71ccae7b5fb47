#include "errors.h"

#include <array>

namespace kvtier::python {
namespace {

constexpr size_t kCodes = static_cast<size_t>(StatusCode::kUnauthenticated) + 1;

// The exception classes by code; filled once by kvtier/_errors.py at import. Leaked on purpose:
// they must outlive every translation, up to interpreter shutdown.
std::array<PyObject*, kCodes>& Classes() {
  static std::array<PyObject*, kCodes> classes{};
  return classes;
}

PyObject* ClassFor(StatusCode code) {
  PyObject* cls = Classes()[static_cast<size_t>(code)];
  return cls != nullptr ? cls : PyExc_RuntimeError;
}

}  // namespace

py::object ErrorObject(const Status& s) {
  py::object cls = py::reinterpret_borrow<py::object>(ClassFor(s.code()));
  return cls(std::string(s.message()));
}

void BindErrors(py::module_& m) {
  m.def(
      "_register_errors",
      [](const py::dict& classes) {
        for (auto [code, cls] : classes) {
          size_t c = code.cast<size_t>();
          if (c >= kCodes) throw py::value_error("unknown status code " + std::to_string(c));
          Py_XDECREF(Classes()[c]);
          Classes()[c] = cls.inc_ref().ptr();
        }
      },
      "Registers the exception class of each status code (called by kvtier._errors).");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object err = ErrorObject(e.status());
      PyErr_SetObject(ClassFor(e.status().code()), err.ptr());
    }
  });
}

}  // namespace kvtier::python
