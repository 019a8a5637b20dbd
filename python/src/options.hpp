// Keyword arguments of the Python functions onto the library API's options structs: one
// table per function, the only place the Python names live (the wrappers in mosaic/__init__.py
// pass **options through, and the docstrings list the table). Unknown names and wrong types
// raise TypeError naming the function and the argument, the way Python's own calls do.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "api/option_rules.hpp"

namespace mosaic::python {

namespace py = pybind11;

template <class O>
struct Field {
  std::string name;
  std::string kind;  ///< "str", "int", "float", "bool", "list of str": shown in docstrings
  std::function<void(O&, py::handle, const std::string& where)> set;
};

[[noreturn]] inline void wrong_type(const std::string& where, const std::string& kind, py::handle v) {
  throw py::type_error(where + " must be " + kind + ", not " + std::string(py::str(py::type::of(v).attr("__name__"))));
}

inline std::string as_str(py::handle v, const std::string& where) {
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  // os.PathLike (pathlib.Path) is a path as good as a string.
  if (py::hasattr(v, "__fspath__")) return py::str(v.attr("__fspath__")()).cast<std::string>();
  wrong_type(where, "str", v);
}
inline int64_t as_int(py::handle v, const std::string& where) {
  if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v)) wrong_type(where, "int", v);
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow) throw py::value_error(where + " is out of range");
  return static_cast<int64_t>(value);
}
inline double as_float(py::handle v, const std::string& where) {
  if (py::isinstance<py::bool_>(v) || !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)))
    wrong_type(where, "float", v);
  return v.cast<double>();
}
inline bool as_bool(py::handle v, const std::string& where) {
  if (!py::isinstance<py::bool_>(v)) wrong_type(where, "bool", v);
  return v.cast<bool>();
}
/// A list or tuple of str, or one str (split at commas, as the CLI's lists are).
inline std::vector<std::string> as_list(py::handle v, const std::string& where) {
  std::vector<std::string> out;
  if (py::isinstance<py::str>(v)) {
    std::string s = v.cast<std::string>(), item;
    for (char c : s + ",") {
      if (c == ',') {
        if (!item.empty()) out.push_back(item);
        item.clear();
      } else {
        item += c;
      }
    }
    return out;
  }
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) wrong_type(where, "a list of str", v);
  size_t i = 0;
  for (py::handle item : v) out.push_back(as_str(item, where + "[" + std::to_string(i++) + "]"));
  return out;
}

/// Field makers: `access` returns a reference to the field inside the options struct.
template <class O, class A>
Field<O> str_field(const std::string& name, A access) {
  return {name, "str", [access](O& o, py::handle v, const std::string& w) { access(o) = as_str(v, w); }};
}
template <class O, class A>
Field<O> int_field(const std::string& name, A access) {
  return {name, "int", [access](O& o, py::handle v, const std::string& w) {
            using T = std::remove_reference_t<decltype(access(o))>;
            const int64_t value = as_int(v, w);
            if (static_cast<int64_t>(static_cast<T>(value)) != value ||
                (std::is_unsigned_v<T> && value < 0))  // would wrap in the field's type
              throw py::value_error(w + " is out of range: " + std::to_string(value));
            access(o) = static_cast<T>(value);
          }};
}
template <class O, class A>
Field<O> float_field(const std::string& name, A access) {
  return {name, "float", [access](O& o, py::handle v, const std::string& w) { access(o) = as_float(v, w); }};
}
template <class O, class A>
Field<O> bool_field(const std::string& name, A access) {
  return {name, "bool", [access](O& o, py::handle v, const std::string& w) { access(o) = as_bool(v, w); }};
}
template <class O, class A>
Field<O> list_field(const std::string& name, A access) {
  return {name, "list of str", [access](O& o, py::handle v, const std::string& w) { access(o) = as_list(v, w); }};
}

/// A list or tuple of int (or one int): rank counts and the like.
template <class O, class A>
Field<O> int_list_field(const std::string& name, A access) {
  return {name, "list of int", [access](O& o, py::handle v, const std::string& w) {
            auto& out = access(o);
            using T = typename std::remove_reference_t<decltype(out)>::value_type;
            out.clear();
            auto put = [&](py::handle item, const std::string& where) {
              const int64_t value = as_int(item, where);
              if (static_cast<int64_t>(static_cast<T>(value)) != value) throw py::value_error(where + " is out of range");
              out.push_back(static_cast<T>(value));
            };
            if (py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v)) return put(v, w);
            if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) wrong_type(w, "a list of int", v);
            size_t i = 0;
            for (py::handle item : v) put(item, w + "[" + std::to_string(i++) + "]");
          }};
}

/// Sets every keyword of `kwargs` through `fields`; None leaves the default. An unknown name
/// is a TypeError that lists the known ones.
template <class O>
void apply(const std::string& function, const std::vector<Field<O>>& fields, const py::dict& kwargs, O& o) {
  for (auto item : kwargs) {
    const std::string key = py::str(item.first);
    const Field<O>* f = nullptr;
    for (const auto& field : fields)
      if (field.name == key) f = &field;
    if (!f) {
      std::string known;
      for (const auto& field : fields) known += (known.empty() ? "" : ", ") + field.name;
      throw py::type_error(function + "() got an unexpected keyword argument '" + key + "' (it takes: " + known + ")");
    }
    if (item.second.is_none()) continue;
    const std::string where = function + "(): argument '" + key + "'";
    f->set(o, item.second, where);
    // The CLI's ranges (api/option_rules.hpp): NaN, infinity, negative counts and zero
    // batches are refused here exactly as the command line refuses them.
    if (f->kind == "int" || f->kind == "float")
      if (const std::string why = api::number_problem(function, key, item.second.cast<double>()); !why.empty())
        throw py::value_error(where + " " + why);
  }
}

/// "name (kind), ..." for a docstring.
template <class O>
std::string describe(const std::vector<Field<O>>& fields) {
  std::string s;
  for (const auto& f : fields) s += "    " + f.name + " (" + f.kind + ")\n";
  return s;
}

}  // namespace mosaic::python
