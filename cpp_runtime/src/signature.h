// A call's arguments bound to a function's parameters as Python binds them, with Python's
// words for a call that does not fit (`save(path) missing required argument 'path'`):
// pybind11's own TypeError for a wrong count or name says "incompatible function
// arguments" and lists its C++ types (`self: object`) and, for an instance not yet made,
// `<repr raised Error>`.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <string>

namespace mdl {

namespace py = pybind11;

// A function's parameters, each positional or by name: the first `required` must be
// given; a later one not given is left null, for the function to supply its default.
// `shown` is how messages write the function: "save(path)", "M(seed=0, params=None)".
template <std::size_t N>
struct Signature {
  const char* shown;
  std::array<const char*, N> names;
  std::size_t required = N;

  std::array<py::object, N> bind(const py::args& args, const py::kwargs& kwargs) const {
    std::array<py::object, N> values;
    if (args.size() > N)
      throw py::type_error(std::string(shown) + " takes " + count(N) + " (" +
                           std::to_string(args.size()) + " given)");
    for (std::size_t i = 0; i < args.size(); ++i) values[i] = args[i];
    for (auto item : kwargs) {
      std::string key = py::str(item.first);
      std::size_t i = 0;
      while (i < N && key != names[i]) ++i;
      if (i == N)
        throw py::type_error(std::string(shown) + " got an unexpected keyword argument '" +
                             key + "'");
      if (values[i])
        throw py::type_error(std::string(shown) + " got multiple values for argument '" +
                             key + "'");
      values[i] = py::reinterpret_borrow<py::object>(item.second);
    }
    for (std::size_t i = 0; i < required; ++i)
      if (!values[i])
        throw py::type_error(std::string(shown) + " missing required argument '" + names[i] +
                             "'");
    return values;
  }

 private:
  static std::string count(std::size_t n) {
    return n == 0 ? "no arguments" : n == 1 ? "1 argument" : std::to_string(n) + " arguments";
  }
};

template <class... Names>
Signature<sizeof...(Names)> signature(const char* shown, Names... names) {
  return {shown, {names...}};
}

}  // namespace mdl
