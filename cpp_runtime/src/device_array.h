// An output or gradient a device model hands back in the device's memory, when asked to
// (`outputs_on_device`): a buffer of its own, which PyTorch, CuPy or JAX read through
// DLPack without a copy (`torch.from_dlpack(out["logits"])`), or `numpy()` copies to the
// host. Its work is finished before it is handed out, so a consumer on any stream may
// read it at once. Or a view of a model's parameter (`device_params`), its memory the
// model's, which a consumer may write.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device_pool.h"
#include "dlpack.h"
#include "mdl/device.h"
#include "mdl/model.h"

namespace mdl {

namespace py = pybind11;

// Whether the pybind11 instance `self` (of a bound class) was made: each of its parts (one
// in a simple layout) says so. One whose __init__ never ran (`cls.__new__(cls)`, copyreg)
// holds memory pybind11 would hand over unbuilt: a freed object's, once.
inline bool constructed(py::handle self) {
  auto* instance = reinterpret_cast<py::detail::instance*>(self.ptr());
  bool made = instance->simple_layout ? instance->simple_holder_constructed : true;
  if (!instance->simple_layout)
    for (const auto& part : py::detail::values_and_holders(instance))
      made &= part.holder_constructed();
  return made;
}

struct DeviceArray {
  // where they come from, for the error of one that is not
  static constexpr const char* origin =
      "DeviceArrays come from a device model (outputs_on_device, to_device, device_params)";

  std::shared_ptr<DeviceBlock> memory;  // from device_pool(); none for a view
  char* view = nullptr;                 // a view's memory (a model's parameter)
  py::object owner;                     // what keeps a view's memory alive (the model)
  std::vector<int64_t> shape;
  DTypeSpec dtype;
  const Device* device;

  // A copy of `bytes` at `data` (the device's memory) into a buffer of its own, queued on
  // `context`'s stream: the caller finishes it (Device::finish) before handing it out.
  DeviceArray(const Device* device, void* context, const void* data,
              std::vector<int64_t> shape, const DTypeSpec& dtype)
      : DeviceArray(device, std::move(shape), dtype) {
    if (bytes()) device->copy(context, this->data(), data, bytes());
  }

  // A buffer of its own, not yet written (nor zeroed: a block the pool kept).
  DeviceArray(const Device* device, std::vector<int64_t> shape, const DTypeSpec& dtype)
      : shape(std::move(shape)), dtype(dtype), device(device) {
    memory = device_pool().take(device, std::size_t(bytes()));
  }

  // A view of `data` (a parameter in `owner`'s memory), not a copy.
  DeviceArray(const Device* device, char* data, py::object owner, std::vector<int64_t> shape,
              const DTypeSpec& dtype)
      : view(data), owner(std::move(owner)), shape(std::move(shape)), dtype(dtype),
        device(device) {}

  char* data() const { return view ? view : memory->data(); }

  // Whether work that writes it may be queued on a stream not the model's: a view (its
  // consumer may write the weights), or memory that went out through DLPack.
  bool may_be_written() const { return view || memory->exported; }

  // A copy of host array `a` (C-contiguous, of dtype `d`), as `to_device` makes.
  static DeviceArray from_host(const Device* device, void* context, const py::array& a,
                               const DTypeSpec& d) {
    DeviceArray out(device, std::vector<int64_t>(a.shape(), a.shape() + a.ndim()), d);
    if (out.bytes()) device->upload(context, out.data(), a.data(), out.bytes());
    return out;
  }

  // `obj` itself, where it is a DeviceArray of this module's in `device`'s memory (an
  // output handed out, or to_device's): an input read where it lies, on any device (the
  // emulated one's memory is the host's, which DLPack alone would make a host array).
  static const DeviceArray* of(py::handle obj, const Device* device) {
    if (!py::isinstance<DeviceArray>(obj)) return nullptr;
    if (!constructed(obj))  // QA: a freed one's shape and memory, and a segfault
      throw py::type_error(std::string("DeviceArray object was never initialized (its "
                                       "__init__ did not run): ") + origin);
    const DeviceArray& a = obj.cast<const DeviceArray&>();
    return a.device == device ? &a : nullptr;
  }

  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }

  int64_t bytes() const { return dtype.itemsize * size(); }

  // The one number it holds, a Python scalar (a copy to the host); else a TypeError with
  // `refusal`, NumPy's words.
  py::object item(const std::string& refusal) const {
    const int64_t n = size();
    if (n != 1)
      throw py::type_error(refusal + ": " + repr() + " holds " + std::to_string(n) +
                           " numbers");
    return numpy().attr("item")();
  }

  py::array numpy() const {
    py::array a(py::dtype(dtype.numpy), std::vector<py::ssize_t>(shape.begin(), shape.end()));
    // no model's context: the array may outlive the model that made it
    if (bytes()) device->download(nullptr, a.mutable_data(), data(), bytes());
    return a;
  }

  // float(a), int(a), operator.index(a) and bool(a) of an array of one number, 0-d (a
  // loss) or of one element, as PyTorch converts a tensor (NumPy 2.4 takes 0-d alone); of
  // more or none, NumPy's errors with its words. Without them float(a) was a TypeError,
  // and bool(a) True whatever a held.
  static constexpr const char* not_one =
      "only length-1 arrays can be converted to Python scalars";
  py::float_ to_float() const { return py::float_(item(not_one)); }
  py::int_ to_int() const { return py::int_(item(not_one)); }
  py::int_ to_index() const {
    const char* words = "only integer scalar arrays can be converted to a scalar index";
    if (dtype.kind != 'i' && dtype.kind != 'u')
      throw py::type_error(std::string(words) + ": " + repr() + " is of dtype " +
                           dtype.numpy);
    return py::int_(item(words));
  }
  py::bool_ truth() const {
    const int64_t n = size();
    if (n == 0)
      throw py::value_error("The truth value of an empty array is ambiguous: " + repr() +
                            " holds no numbers");
    if (n > 1)
      throw py::value_error("The truth value of an array with more than one element is "
                            "ambiguous: " + repr() + " holds " + std::to_string(n) +
                            " numbers; read them with numpy() (a.numpy().any(), .all())");
    return py::bool_(numpy().attr("item")());
  }

  py::tuple dlpack_device() const { return py::make_tuple(device->dlpack_device_type, 0); }

  // A "dltensor" capsule over the memory, which `self` (this array's Python object) keeps
  // alive until the consumer calls its deleter (or the capsule goes unconsumed).
  py::capsule dlpack(py::object self) const {
    struct Exported {
      DLManagedTensor managed;
      std::vector<int64_t> shape;
      py::object owner;
    };
    if (memory) memory->exported = true;  // its consumer may read it after letting it go
    auto* e = new Exported{{}, shape, std::move(self)};
    DLTensor& t = e->managed.dl_tensor;
    t.data = data();
    t.device = {device->dlpack_device_type, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = {uint8_t(dtype.kind == 'f' ? 2 : dtype.kind == 'i' ? 0 : dtype.kind == 'b' ? 6 : 1),
               uint8_t(8 * dtype.itemsize), 1};
    t.shape = e->shape.data();
    t.strides = nullptr;  // C-contiguous
    t.byte_offset = 0;
    e->managed.manager_ctx = e;
    e->managed.deleter = [](DLManagedTensor* m) {
      py::gil_scoped_acquire gil;  // a consumer may free it from any thread
      delete static_cast<Exported*>(m->manager_ctx);
    };
    // never consumed (still named "dltensor"): the capsule frees it
    PyObject* capsule = PyCapsule_New(&e->managed, "dltensor", [](PyObject* c) {
      if (!PyCapsule_IsValid(c, "dltensor")) return;
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      m->deleter(m);
    });
    if (!capsule) {
      delete e;
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::capsule>(capsule);
  }

  // __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None), the array
  // API's (`self` this array's Python object): a capsule over the memory; copy=True one
  // over a copy of it in the device's memory (they were ignored, and
  // np.from_dlpack(param, copy=True) followed the weights); dl_device another device's
  // only as a copy in host memory. A stream is any: the work that made the array is done.
  py::object dlpack_asked(py::object self, const py::kwargs& options) const {
    py::object stream = py::none(), dl_device = py::none(), copy = py::none(),
               max_version = py::none();
    for (auto [key, value] : options) {
      const std::string name = py::str(key);
      if (name == "stream") stream = py::reinterpret_borrow<py::object>(value);
      else if (name == "dl_device") dl_device = py::reinterpret_borrow<py::object>(value);
      else if (name == "copy") copy = py::reinterpret_borrow<py::object>(value);
      else if (name == "max_version") max_version = py::reinterpret_borrow<py::object>(value);
      else
        throw py::type_error("__dlpack__() got an unexpected keyword argument '" + name +
                             "' (it takes stream, max_version, dl_device and copy)");
    }
    if (!stream.is_none() && (!PyLong_Check(stream.ptr()) || PyBool_Check(stream.ptr())))
      throw py::type_error("__dlpack__(stream=...): a stream is None or an int, got " +
                           std::string(py::str(py::type::handle_of(stream).attr("__name__"))));
    if (!copy.is_none() && !PyBool_Check(copy.ptr()))
      throw py::type_error("__dlpack__(copy=...): copy is None, True or False, got " +
                           std::string(py::str(py::type::handle_of(copy).attr("__name__"))));
    const bool copied = copy.ptr() == Py_True;
    if (!dl_device.is_none()) {
      int type = -1, id = -1;
      if (PyTuple_Check(dl_device.ptr()) && py::len(dl_device) == 2) {
        try {
          type = py::cast<int>(dl_device[py::int_(0)]);
          id = py::cast<int>(dl_device[py::int_(1)]);
        } catch (const py::cast_error&) {
        }
      }
      if (type < 0 || id < 0)
        throw py::type_error("__dlpack__(dl_device=...): a device is a tuple (device_type, "
                             "device_id) of ints, got " + std::string(py::repr(dl_device)));
      if (type != device->dlpack_device_type || id != 0) {
        if (copied && type == 1 /* kDLCPU */)
          return numpy().attr("__dlpack__")(py::arg("max_version") = max_version);
        throw py::buffer_error(repr() + " lies on DLPack device (" +
                               std::to_string(device->dlpack_device_type) + ", 0), not " +
                               std::string(py::repr(dl_device)) + ": ask for a copy in host "
                               "memory (copy=True, dl_device=(1, 0)), or call numpy()");
      }
    }
    if (!copied) return dlpack(self);
    DeviceArray twin(device, shape, dtype);
    if (bytes()) {
      device->copy(nullptr, twin.data(), data(), bytes());
      device->synchronize();
    }
    py::object made = py::cast(std::move(twin));
    return made.cast<const DeviceArray&>().dlpack(made);
  }

  std::string repr() const {
    std::string out = "DeviceArray(" + std::string(dtype.name) + "[";
    for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
    return out + "] on " + device->name + ")";
  }
};

}  // namespace mdl
