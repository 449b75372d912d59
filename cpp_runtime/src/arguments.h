// A call's arguments (inputs, cotangents) as a model reads them: checked against their
// declared types, made C-contiguous host arrays, or (for a model on a device) tensors
// already in the device's memory read in place through DLPack, and copied to the device
// where they are not.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "dlpack.h"
#include "mdl/device.h"
#include "mdl/error.h"
#include "mdl/model.h"

namespace mdl {

namespace py = pybind11;

inline bool has_dtype(const py::array& a, const DTypeSpec& d) {
  return a.dtype().kind() == d.kind && a.dtype().itemsize() == d.itemsize;
}

inline std::string type_text(const TensorSpec& s, const char* const* dim_names) {
  std::string out = s.dtype.name;
  if (!s.rank) return out;
  out += "[";
  for (int i = 0; i < s.rank; ++i) {
    if (i) out += ", ";
    const int64_t d = s.dims[i];
    out += s.derived(i) ? s.texts[i] : d >= 0 ? std::to_string(d) : dim_names[-d - 1];
  }
  return out + "]";
}

template <class Dim>
std::string shape_text(const std::string& dtype, int64_t rank, const Dim* shape) {
  std::string out = dtype + "[";
  for (int64_t i = 0; i < rank; ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

inline std::string shape_text(const py::array& a) {
  return shape_text(std::string(py::str(a.dtype())), a.ndim(), a.shape());
}

// Whether a DLPack tensor's elements are of dtype `d`.
inline bool has_dtype(const DLTensor& t, const DTypeSpec& d) {
  int code = d.kind == 'f' ? 2 : d.kind == 'i' ? 0 : d.kind == 'u' ? 1 : d.kind == 'b' ? 6 : -1;
  return t.dtype.code == code && t.dtype.bits == 8 * d.itemsize && t.dtype.lanes == 1;
}

inline std::string shape_text(const DLPackTensor& t) {
  return shape_text(t.dtype_name(), t.tensor->ndim, t.tensor->shape);
}

// An argument, checked: a C-contiguous host array, or (a device model's) a tensor in the
// device's memory, read in place.
struct Argument {
  py::object keep;  // holds its memory: the array, or the DLPack tensor's owner
  void* data;
  std::size_t bytes;
  bool on_device;
  // On the device: whether work that writes it may still be queued (on any stream). A
  // DeviceArray that never went out through DLPack was finished before it was handed out.
  bool wait = true;
};

// The arguments of one call: what holds their memory (changed under the GIL only), and
// what a device model copies over.
struct Arguments {
  std::vector<py::object> keep;
  std::vector<std::size_t> bytes;
  std::vector<char> on_device, wait;

  void reserve(std::size_t n) {
    keep.reserve(n);
    bytes.reserve(n);
    on_device.reserve(n);
    wait.reserve(n);
  }

  void add(const Argument& a, std::vector<void*>& pointers) {
    keep.push_back(a.keep);
    bytes.push_back(a.bytes);
    on_device.push_back(a.on_device);
    wait.push_back(a.on_device && a.wait);
    pointers.push_back(a.data);
  }
};

// `text` as an interned Python str.
inline py::object interned(const char* text) {
  PyObject* s = PyUnicode_InternFromString(text);
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(s);
}

// A table of TensorSpecs (a model's inputs, outputs or gradients) with its Python objects,
// made once per model: the names as interned strs, whose hashes a dict lookup finds
// cached, and the NumPy dtypes. A call neither makes a str from a C string nor parses a
// dtype's name (a generation step's call took 2.7 us at H = 4 before: perf showed both).
struct PyTensorTable {
  const TensorSpec* specs;
  int count;
  std::vector<py::object> names;
  std::vector<py::dtype> dtypes;

  PyTensorTable(const TensorSpec* specs, int count) : specs(specs), count(count) {
    for (int i = 0; i < count; ++i) {
      names.push_back(interned(specs[i].name));
      dtypes.emplace_back(specs[i].dtype.numpy);
    }
  }
};

// kwargs[name], borrowed; null where absent.
inline PyObject* lookup(const py::dict& kwargs, const py::object& name) {
  PyObject* got = PyDict_GetItemWithError(kwargs.ptr(), name.ptr());
  if (!got && PyErr_Occurred()) throw py::error_already_set();
  return got;
}

// A str (a keyword's name, a dict's key) as a message's text: its UTF-8, or where it has
// none (a lone surrogate, "\ud800") as ascii() writes it, without the quotes: the plain
// cast raised UnicodeEncodeError, and pybind11's "Unable to cast" for a name argument.
inline std::string text_of(py::handle s) {
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_Check(s.ptr()) ? PyUnicode_AsUTF8AndSize(s.ptr(), &size) : nullptr;
  if (utf8) return std::string(utf8, std::size_t(size));
  PyErr_Clear();
  std::string shown = py::str(py::module_::import("builtins").attr("ascii")(s));
  return shown.size() >= 2 && PyUnicode_Check(s.ptr()) ? shown.substr(1, shown.size() - 2)
                                                       : shown;
}

// The name of v's type, as a message says what it got. (`py::type::handle_of`, not
// `handle::get_type()`, which pybind11 3 deprecates.)
inline std::string type_name(py::handle v) {
  return py::str(py::type::handle_of(v).attr("__name__"));
}

// A keyword argument `what` (as a message names it: `forward(): training`) that must be a
// bool or a real number: a TypeError naming it otherwise, not pybind11's "Unable to cast".
// A bool is True or False (or a NumPy bool), nothing else: a truthy 1, 0.5 or None would
// be a guess.
inline bool bool_argument(py::handle v, const std::string& what) {
  if (v.ptr() == Py_True) return true;
  if (v.ptr() == Py_False) return false;
  if (py::isinstance(v, py::module_::import("numpy").attr("bool_")))
    return PyObject_IsTrue(v.ptr()) == 1;
  throw py::type_error(what + " must be True or False, got " + type_name(v));
}

// An int past a double's range (10**400) is that infinity, as float("1e400") is: the
// caller's range check then refuses it as too large (it was "must be a number, got int").
inline double number_argument(py::handle v, const std::string& what) {
  if (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr())) {
    double d = PyLong_AsDouble(v.ptr());
    if (d == -1.0 && PyErr_Occurred()) {  // it was taken as inf: "must be finite, got inf"
      PyErr_Clear();
      throw py::value_error(what + " is an int past the range of any float");
    }
    return d;
  }
  try {
    if (!PyBool_Check(v.ptr())) return py::cast<double>(v);
  } catch (py::cast_error&) {
  }
  throw py::type_error(what + " must be a number, got " + type_name(v));
}

// A count (a seed, a number of calls): an int in [0, 2**64), or a TypeError / ValueError
// beginning with `what`.
inline uint64_t count_argument(py::handle v, const std::string& what) {
  if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
    throw py::type_error(what + " must be an int, got " + type_name(v));
  py::object value = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!value) {  // an array of more than one element, or of floats
    PyErr_Clear();
    throw py::type_error(what + " must be an int, got " + type_name(v));
  }
  unsigned long long n = PyLong_AsUnsignedLongLong(value.ptr());
  if (n == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {  // < 0 or >= 2**64
    PyErr_Clear();
    throw py::value_error(what + " must be in [0, 2**64), got " + std::string(py::str(value)));
  }
  return n;
}

// A file's path: a str or an os.PathLike (bytes too), or a TypeError beginning with `what`.
inline void path_argument(py::handle v, const std::string& what) {
  if (!PyUnicode_Check(v.ptr()) && !PyBytes_Check(v.ptr()) && !py::hasattr(v, "__fspath__"))
    throw py::type_error(what + " must be a str or an os.PathLike, got " + type_name(v));
}

// A NumPy array of `obj`: itself, one over a `__dlpack__` object's memory, or a new one;
// a copy in this machine's byte order where its bytes are swapped (`>i4` here), which
// the kernels would otherwise read as other numbers. What NumPy cannot read as an array
// (a ragged list) is a ValueError or TypeError naming it: `kind` and `name` ("input",
// "tokens"; the text is made only then, calls make none).
inline py::array as_array(py::handle obj, const char* kind, const char* name = nullptr) {
  py::object arr = py::reinterpret_borrow<py::object>(obj);
  if (!py::isinstance<py::array>(arr)) {
    py::module_ np = py::module_::import("numpy");
    try {
      arr = py::hasattr(arr, "__dlpack__") ? np.attr("from_dlpack")(arr)
                                           : np.attr("asarray")(arr);
    } catch (py::error_already_set& e) {
      // what the producer of a __dlpack__ says too (torch: a bfloat16 tensor, one that
      // requires grad, a meta tensor), named; not an interrupt or a lack of memory
      if (!e.matches(PyExc_Exception) || e.matches(PyExc_MemoryError)) throw;
      const std::string why = std::string(kind) + (name ? " '" + std::string(name) + "'" : "") +
                              ": NumPy cannot read it as an array: " +
                              (e.matches(PyExc_TypeError) || e.matches(PyExc_ValueError)
                                   ? ""
                                   : type_name(e.value()) + ": ") +
                              std::string(py::str(e.value()));
      if (e.matches(PyExc_TypeError)) throw py::type_error(why);
      throw py::value_error(why);
    }
  }
  constexpr char swapped = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? '>' : '<';
  py::array a = py::reinterpret_borrow<py::array>(arr);
  if (a.dtype().byteorder() == swapped)
    a = a.attr("astype")(a.dtype().attr("newbyteorder")("="));
  return a;
}

// The index of the first finite element of `raw` whose magnitude is past `largest` (a
// narrower float's largest number), or -1: a cast to that float makes it inf.
inline py::ssize_t past_range(const py::array& raw, double largest) {
  auto wide = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(raw);
  if (!wide) return -1;  // the cast that follows says what is wrong
  const double* v = wide.data();
  for (py::ssize_t k = 0; k < wide.size(); ++k)
    if (std::fabs(v[k]) > largest && !std::isinf(v[k])) return k;  // an inf is the caller's
  return -1;
}

// An int as a message writes it: itself, or where it has more than 24 digits (10**400)
// its leading digits and exponent, "1e+400", not 401 digits.
inline std::string int_text(py::handle v) {
  std::string s = py::str(v);
  const std::size_t sign = s[0] == '-', digits = s.size() - sign;
  if (digits <= 24) return s;
  std::string lead = s.substr(sign, 3);
  while (lead.size() > 1 && lead.back() == '0') lead.pop_back();
  if (lead.size() > 1) lead.insert(1, ".");
  return s.substr(0, sign) + lead + "e+" + std::to_string(digits - 1);
}

// The error of element `k` of an argument, `value` as a message writes it, past `range`.
inline py::value_error past_range_error(const char* kind_of_argument, const char* name,
                                        const std::string& value, py::ssize_t k,
                                        const std::string& range) {
  return py::value_error(std::string(kind_of_argument) + " '" + name + "': holds " + value +
                         " (element " + std::to_string(k) + "), past the range of " + range);
}

inline std::string float_range(const DTypeSpec& d, double largest) {
  char text[80];
  std::snprintf(text, sizeof text, "the model's %s (its largest number is %.2g)", d.name,
                largest);
  return text;
}

// The integer dtype's range as a message writes it, i32 (-2147483648 to 2147483647), its
// name as `d` spells it (ir/dtypes.py's; the language's one integer dtype is 32 bits).
inline std::string int_range(const DTypeSpec& d) {
  return std::string(d.name) + " (" + std::to_string(INT32_MIN) + " to " +
         std::to_string(INT32_MAX) + ")";
}

// The flat index of the first bool (Python's or NumPy's, or a bool array's) in the
// nested lists and tuples `obj`, or -1; `seen` counts the elements before it.
inline py::ssize_t first_bool(py::handle obj, py::ssize_t& seen) {
  if (PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr())) {
    for (py::handle item : py::reinterpret_borrow<py::sequence>(obj))
      if (py::ssize_t k = first_bool(item, seen); k >= 0) return k;
    return -1;
  }
  if (PyBool_Check(obj.ptr())) return seen;
  if (PyLong_Check(obj.ptr()) || PyFloat_Check(obj.ptr())) {
    ++seen;
    return -1;
  }
  // what else NumPy read as part of the array: a NumPy scalar, an array, a str, None
  py::array a = py::module_::import("numpy").attr("asarray")(obj);
  if (a.dtype().kind() == 'b' && a.size()) return seen;
  seen += a.size();
  return -1;
}

// What NumPy reads as objects from a list of numbers: an int past int64 and uint64
// (10**400, 2**70). Into a float it is that number (2**70 fits an f32) unless it is past
// the float's range; into an i32 it never fits. The first element past the range is a
// ValueError naming `kind_of_argument` and `name`; anything but ints and floats stays
// `a`, refused as objects by the dtype check.
inline py::array objects_as_declared(const py::array& a, const DTypeSpec& d,
                                     const char* kind_of_argument, const char* name) {
  py::module_ np = py::module_::import("numpy");
  py::object flat = a.attr("ravel")();
  const py::ssize_t n = a.size();
  auto is_float = [&](const py::object& v) {
    return PyFloat_Check(v.ptr()) || py::isinstance(v, np.attr("floating"));
  };
  for (py::ssize_t k = 0; k < n; ++k) {
    py::object v = flat[py::int_(k)];
    const bool integer = (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr())) ||
                         py::isinstance(v, np.attr("integer"));
    if (!integer && !(d.kind == 'f' && is_float(v))) return a;
  }
  const double largest = d.itemsize == 4 ? double(std::numeric_limits<float>::max())
                                         : std::numeric_limits<double>::max();
  for (py::ssize_t k = 0; k < n; ++k) {
    py::object v = flat[py::int_(k)];
    if (d.kind == 'i') {
      py::int_ i(v);
      if (i < py::int_(INT32_MIN) || i > py::int_(INT32_MAX))
        throw past_range_error(kind_of_argument, name, int_text(i), k, int_range(d));
      continue;
    }
    const bool integer = !is_float(v);
    double x = integer ? PyLong_AsDouble(py::int_(v).ptr()) : py::cast<double>(v);
    if (x == -1.0 && PyErr_Occurred()) {  // an int past any double's range
      PyErr_Clear();
      x = HUGE_VAL;
    }
    if (std::fabs(x) > largest && (integer || !std::isinf(x))) {
      char text[40];
      std::snprintf(text, sizeof text, "%g", x);
      throw past_range_error(kind_of_argument, name, integer ? int_text(v) : text, k,
                             float_range(d, largest));
    }
  }
  return a.attr("astype")(np.attr("dtype")(d.numpy));
}

// A list, a tuple or a Python number has no dtype of its own: NumPy's reading `a` of it
// (int64 or float64) is taken as the declared dtype `d` where that loses nothing a user
// wrote: numbers into a float (as torch.tensor([0.1]) is float32) within its range (1e40
// into an f32 became inf, with NumPy's warning only: a ValueError naming `kind` and
// `name`), integers that fit into i32 (`ids=[0, 1]` was "expected i32[B], got
// int64[2]"); ints NumPy reads as objects (10**400) too. A bool among the numbers is
// refused, as `[True]` and a bool array are (NumPy reads `[True, 2, 3]` as int64 and
// `[True, 0.5]` as float64: they were read as numbers). Anything else stays `a`, which
// the dtype check then refuses; so does an array `obj`, or a list NumPy read as `d`.
inline py::array as_declared(py::handle obj, const py::array& a, const DTypeSpec& d,
                             const char* kind_of_argument, const char* name) {
  bool plain = PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr()) ||
               PyLong_Check(obj.ptr()) || PyFloat_Check(obj.ptr());
  char kind = a.dtype().kind();
  if (!plain || PyBool_Check(obj.ptr()) || kind == 'b' || kind == 'c') return a;
  if (py::ssize_t seen = 0, k = d.kind == 'b' ? -1 : first_bool(obj, seen); k >= 0)
    throw py::value_error(std::string(kind_of_argument) + " '" + name + "': holds a bool " +
                          "(element " + std::to_string(k) + "), not an " + d.name +
                          " (wrong dtype)");
  if (has_dtype(a, d)) return a;
  py::module_ np = py::module_::import("numpy");
  if (kind == 'O') return d.kind == 'b' ? a : objects_as_declared(a, d, kind_of_argument, name);
  if (a.size() == 0)  // `ids=[]`: no number to lose (NumPy reads it as float64)
    return a.attr("astype")(np.attr("dtype")(d.numpy));
  if (d.kind == 'f' && (kind == 'i' || kind == 'u' || kind == 'f')) {
    const double largest = double(std::numeric_limits<float>::max());
    if (py::ssize_t k = d.itemsize == 4 ? past_range(a, largest) : -1; k >= 0) {
      char text[40];
      std::snprintf(text, sizeof text, "%g", py::cast<double>(a.attr("ravel")()[py::int_(k)]));
      throw past_range_error(kind_of_argument, name, text, k, float_range(d, largest));
    }
    return a.attr("astype")(np.attr("dtype")(d.numpy));
  }
  if (d.kind == 'i' && (kind == 'i' || kind == 'u')) {
    py::array cast = a.attr("astype")(np.attr("dtype")(d.numpy));
    if (py::cast<bool>(np.attr("array_equal")(cast, a))) return cast;
    // which integer does not fit (it said "got int64[2] (wrong dtype)")
    const py::ssize_t k = py::cast<py::ssize_t>(
        np.attr("flatnonzero")(np.attr("not_equal")(cast, a))[py::int_(0)]);
    throw past_range_error(kind_of_argument, name, py::str(a.attr("ravel")()[py::int_(k)]), k,
                           int_range(d));
  }
  return a;
}

// Checks input `which`'s dtype and shape against `s` (its model's `dim_names`), binding
// user dims, then its dims made of others against `shape_of`'s; `got()` says what came
// (called for a message only).
template <class Dim, class Got>
void check_type(const TensorSpec& s, const char* const* dim_names, bool dtype_ok, int64_t rank,
                const Dim* shape, Got got, std::vector<int64_t>& dims,
                ShapeFunction shape_of, int which) {
  auto bad = [&](const std::string& why) {
    return py::value_error("input '" + std::string(s.name) + "': expected " +
                           type_text(s, dim_names) + ", got " + got() + " (" + why +
                           ")");
  };
  if (!dtype_ok) throw bad("wrong dtype");
  if (rank != s.rank) throw bad("wrong rank");
  for (int i = 0; i < s.rank; ++i) {
    int64_t n = shape[i], d = s.dims[i];
    if (d >= 0 && n != d)
      throw bad("dim " + std::to_string(i) + " must be " + std::to_string(d));
    if (d < 0 && !s.derived(i)) {
      int64_t& bound = dims[-d - 1];
      if (bound >= 0 && bound != n)
        throw bad(std::string(dim_names[-d - 1]) + " = " + std::to_string(bound) +
                  " from an earlier input");
      bound = n;
    }
  }
  if (!s.texts) return;  // no dim made of others
  std::vector<int64_t> want(std::size_t(s.rank));
  shape_of(which, dims.data(), nullptr, want.data());
  for (int i = 0; i < s.rank; ++i)
    if (s.derived(i) && int64_t(shape[i]) != want[i])
      throw bad("dim " + std::to_string(i) + " must be " + s.texts[i] + " = " +
                std::to_string(want[i]));
}

// A host array as an argument, made C-contiguous (a copy where it is not: one NumPy
// could not allocate said only "std::bad_alloc", of a broadcast view of 1e11 elements).
inline Argument on_host(py::array a) {
  if (!(a.flags() & py::array::c_style)) {
    const std::size_t bytes = std::size_t(a.nbytes());
    a = py::array::ensure(a, py::array::c_style);
    if (!a) throw OutOfMemory(bytes);
  }
  return {a, const_cast<void*>(a.data()), std::size_t(a.nbytes()), false};
}

// A host bool array (`arg`, from on_host) with bytes of 0 and 1 only: NumPy takes any
// nonzero byte for True (uint8 data viewed as bool), where generated code computes with
// the byte (f32 of a byte 2 was 2.0, and `m == (x > 0)` false). Such an array is copied,
// each byte made 0 or 1; the common one is only read.
inline void bools_as_0_1(Argument& arg) {
  const auto* p = static_cast<const uint8_t*>(arg.data);
  std::size_t i = 0;
  while (i < arg.bytes && p[i] <= 1) ++i;
  if (i == arg.bytes) return;
  py::array given = py::reinterpret_borrow<py::array>(arg.keep);
  py::array made(given.dtype(), std::vector<py::ssize_t>(given.shape(),
                                                          given.shape() + given.ndim()));
  auto* q = static_cast<uint8_t*>(made.mutable_data());
  for (std::size_t k = 0; k < arg.bytes; ++k) q[k] = p[k] != 0;
  arg = {made, made.mutable_data(), arg.bytes, false};
}

// A host array over `device`'s own memory (a NumPy or torch view of an emulated device's
// DeviceArray): read in place, as a CUDA tensor is; else none (an ordinary host array).
inline bool device_view(const Device& device, const py::array& a, const char* role,
                        const char* name, Argument& out) {
  if (device.check_process) device.check_process();  // before asking the device anything
  if (!device.holds || a.nbytes() == 0 || !device.holds(a.data())) return false;
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(role) + " '" + name + "': a view of the device's "
                          "memory is read in place and must be C-contiguous");
  out = {a, const_cast<void*>(a.data()), std::size_t(a.nbytes()), true};
  return true;
}

// Whether argument `name` (an input or a cotangent, the `role`) lives in CUDA memory
// (`__dlpack_device__`), which only a device model reads (`model` says which runs where).
template <class T>
bool on_cuda(py::handle obj, const char* role, const char* name, const ModelSpec<T>& model) {
  if (py::isinstance<py::array>(obj)) return false;
  DLDevice where = dlpack_device(obj, role, name);
  if (where.device_type != kDLCUDA) return false;
  if (model.device->in_place)
    throw py::value_error(std::string(role) + " '" + name + "' is a tensor on CUDA device " +
                          std::to_string(where.device_id) + ", but model " + model.name +
                          " runs on the CPU: pass it in host memory (e.g. tensor.cpu()), or "
                          "build the model with --target cuda");
  return true;
}

// A CUDA tensor as an argument, read where it is: it must be C-contiguous.
inline Argument in_place(const DLPackTensor& t, const char* role, const char* name) {
  std::string what = std::string(role) + " '" + name + "'";
  if (t.tensor->device.device_type != kDLCUDA)
    throw py::value_error(what + ": its __dlpack_device__ says CUDA, but its tensor is not "
                          "in CUDA memory");
  if (!t.contiguous())
    throw py::value_error(what + ": a tensor on the GPU is read in place and must be "
                          "C-contiguous; pass a contiguous tensor (e.g. tensor.contiguous())");
  std::size_t bytes = (t.tensor->dtype.bits + 7) / 8;
  for (int d = 0; d < t.tensor->ndim; ++d) bytes *= t.tensor->shape[d];
  return {t.owner, t.data(), bytes, true};
}

// For a model on `device` (its `context`): `pointers` (the call's arguments, by position)
// made device memory. Host arguments are copied into `buffers` (the model's, one per position,
// kept between calls); tensors already on the device stay where they are, once the work
// that made them (on any stream) has finished: the device is waited for once, where one
// may still be written (a DLPack tensor, a DeviceArray that went out through DLPack),
// unless the caller has just `waited` for it.
inline void place(const Device* device, void* context, const Arguments& args,
                  std::vector<void*>& pointers, std::vector<Buffer<char>>& buffers,
                  bool waited = false) {
  if (buffers.size() < pointers.size()) buffers.resize(pointers.size());
  for (size_t i = 0; i < pointers.size(); ++i) {
    if (args.on_device[i]) {
      if (args.wait[i] && !waited) device->synchronize();
      waited |= bool(args.wait[i]);
      continue;
    }
    if (buffers[i].size() < int64_t(args.bytes[i]))
      buffers[i] = Buffer<char>(device, args.bytes[i]);
    upload(device, context, buffers[i].data(), pointers[i], args.bytes[i]);
    pointers[i] = buffers[i].data();
  }
}

}  // namespace mdl
