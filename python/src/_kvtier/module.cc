// The _kvtier extension: the C++ client under the kvtier package (python/src/kvtier), which
// gives it Python names, defaults and docstrings.

#include <pybind11/pybind11.h>

#include "bindings.h"
#include "errors.h"

PYBIND11_MODULE(_kvtier, m) {
  m.doc() = "kvtier's C++ client library; use the kvtier package, not this module.";
  kvtier::python::BindErrors(m);
  kvtier::python::BindKeys(m);
  kvtier::python::BindClient(m);
  kvtier::python::BindShm(m);
  kvtier::python::BindLMCache(m);
}
