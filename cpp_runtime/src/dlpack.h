// Tensors in GPU memory handed over through DLPack (`__dlpack__`), which a device model
// reads in place. Only the few structs of DLPack's ABI (dlpack.h, the unversioned
// DLManagedTensor every producer hands out when no max_version is asked for) are needed,
// so they are spelled here rather than vendoring the header.
#pragma once

#include <pybind11/pybind11.h>

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mdl {

namespace py = pybind11;

constexpr int32_t kDLCUDA = 2;  // DLDeviceType: memory of a CUDA GPU

struct DLDevice {
  int32_t device_type;  // DLDeviceType, a C enum
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: C-contiguous
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// The DLPack device of `obj` ((type, id) from `__dlpack_device__`), or type -1 where it
// has none; anything but two ints is a TypeError naming it (the `role` `name`).
inline DLDevice dlpack_device(py::handle obj, const char* role, const char* name) {
  if (!py::hasattr(obj, "__dlpack_device__")) return {-1, 0};
  py::object device;
  try {
    device = obj.attr("__dlpack_device__")();
  } catch (py::error_already_set& e) {  // torch's meta tensor: "Unknown device type meta"
    if (!e.matches(PyExc_Exception) || e.matches(PyExc_MemoryError)) throw;
    throw py::value_error(std::string(role) + " '" + name + "': its __dlpack_device__() "
                          "raised " +
                          std::string(py::str(py::type::handle_of(e.value()).attr("__name__"))) +
                          ": " +
                          std::string(py::str(e.value())));
  }
  auto is_int = [](py::handle v) { return PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr()); };
  if (!PyTuple_Check(device.ptr()) || PyTuple_Size(device.ptr()) != 2 ||
      !is_int(PyTuple_GET_ITEM(device.ptr(), 0)) || !is_int(PyTuple_GET_ITEM(device.ptr(), 1)))
    throw py::type_error(std::string(role) + " '" + name + "': its __dlpack_device__() must "
                         "return (device type, device id), two ints, got " +
                         std::string(py::repr(device)));
  try {
    return {py::cast<int32_t>(PyTuple_GET_ITEM(device.ptr(), 0)),
            py::cast<int32_t>(PyTuple_GET_ITEM(device.ptr(), 1))};
  } catch (const py::cast_error&) {
    throw py::value_error(std::string(role) + " '" + name + "': its __dlpack_device__() " +
                          std::string(py::repr(device)) + " is out of range");
  }
}

// A tensor taken from a `__dlpack__` object: `owner` holds it (and hands it back to its
// producer when the last reference goes), `tensor` describes it.
struct DLPackTensor {
  py::object owner;
  const DLTensor* tensor;

  void* data() const { return static_cast<char*>(tensor->data) + tensor->byte_offset; }
  std::vector<int64_t> shape() const {
    return std::vector<int64_t>(tensor->shape, tensor->shape + tensor->ndim);
  }

  // Whether the elements lie in row-major order without gaps (a dim of size 1 may have any
  // stride, and an empty tensor any strides).
  bool contiguous() const {
    if (!tensor->strides) return true;
    int64_t expected = 1;
    for (int d = tensor->ndim - 1; d >= 0; --d) {
      if (tensor->shape[d] == 0) return true;
      if (tensor->shape[d] != 1 && tensor->strides[d] != expected) return false;
      expected *= tensor->shape[d];
    }
    return true;
  }

  // NumPy's name for the element type, as messages show it.
  std::string dtype_name() const {
    const DLDataType& t = tensor->dtype;
    static const char* const names[] = {"int", "uint", "float", "opaque", "bfloat", "complex",
                                        "bool"};
    std::string name = t.code < 7 ? names[t.code] : "dlpack-code-" + std::to_string(t.code);
    if (t.code != 6) name += std::to_string(t.bits);
    return t.lanes == 1 ? name : name + "x" + std::to_string(t.lanes);
  }
};

// Hands a consumed tensor back to its producer.
inline void release_dlpack(void* p) {
  auto* managed = static_cast<DLManagedTensor*>(p);
  if (managed->deleter) managed->deleter(managed);
}

// The tensor behind `obj.__dlpack__()`, consumed as the protocol asks: its capsule renamed
// "used_dltensor" so that the producer's capsule no longer frees it; `owner` calls the
// producer's deleter instead. `__dlpack__` is asked for no stream: the caller waits for
// the whole device before reading it (Device::synchronize).
inline DLPackTensor take_dlpack(py::handle obj) {
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")(py::arg("stream") = py::none());
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    capsule = obj.attr("__dlpack__")();  // a producer older than the stream argument
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!managed || PyCapsule_SetName(capsule.ptr(), "used_dltensor")) throw py::error_already_set();
  py::capsule owner;
  try {
    owner = py::capsule(managed, &release_dlpack);
  } catch (...) {
    release_dlpack(managed);
    throw;
  }
  return {std::move(owner), &managed->dl_tensor};
}

}  // namespace mdl
