// What the extension's files share: Status to Python exceptions, and
// numpy arrays in and out.
#pragma once

#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

// A numpy array of exactly dtype T (any shape), C-contiguous; `what` names
// it in the error otherwise. No conversion: a wrong dtype is the caller's
// mistake, not something to guess around.
template <typename T>
py::array_t<T, py::array::c_style | py::array::forcecast> ExpectArray(const py::handle& obj, const std::string& what) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(what + ": expected a numpy array, got " + std::string(py::str(obj.get_type())));
  }
  auto arr = py::reinterpret_borrow<py::array>(obj);
  if (!arr.dtype().is(py::dtype::of<T>())) {
    throw py::type_error(what + ": expected dtype " + std::string(py::str(py::dtype::of<T>())) + ", got " +
                         std::string(py::str(arr.dtype())));
  }
  return py::array_t<T, py::array::c_style | py::array::forcecast>(arr);
}

// Hands `v` to numpy without a copy: the array's base owns it.
template <typename T>
py::array_t<T> AdoptVector(std::vector<T>&& v, std::vector<int64_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(std::move(shape), owned->data(), base);
}

// Binds the job's data, step split and initial DLRM parameters
// (bindings_data.cc).
void BindData(pybind11::module_& m);

}  // namespace tessera
