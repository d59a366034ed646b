// What the extension's files share: Status to Python exceptions.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include "common/status.h"

namespace tessera {

namespace py = pybind11;

// Status -> Python exception (with the GIL held: never inside a
// gil_scoped_release): the message, with the code's name, as Tessera
// prints it. Argument errors are ValueError; the rest are TesseraError.
// (A raw reference, kept for the process's life: a py::object here would be
// released after the interpreter is gone.)
inline PyObject* g_tessera_error = nullptr;

[[noreturn]] inline void Raise(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      throw py::value_error(st.ToString());
    default:
      PyErr_SetString(g_tessera_error, st.ToString().c_str());
      throw py::error_already_set();
  }
}

template <typename T>
T Check(StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return std::move(*v);
}

inline void Check(const Status& st) {
  if (!st.ok()) Raise(st);
}

// Binds the job's data, step split and initial DLRM parameters
// (bindings_data.cc).
void BindData(pybind11::module_& m);

}  // namespace tessera
