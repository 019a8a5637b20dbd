// An operator written in Python (mosaic.Operator) as Mosaic kernels, registered through
// register_extension (backends/plugins.hpp), the path C++ plugins take:
//   - a custom-domain op (cls.domain set): its schema (arity, shape inference and FLOPs from
//     the class) and its kernel on naive, the oracle other backends are checked against;
//   - an ONNX op (no domain): a kernel on the backend "python" (added with the first one), which
//     placements pick per op type or node name (assign="Relu=python", "@relu3=python") and
//     which is checked against naive like any backend.
// Inputs cross as read-only NumPy views (no copies); outputs and input gradients the class
// returns are checked (shape, dtype) and copied into Mosaic's buffers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <mutex>

#include "backends/plugin.hpp"
#include "backends/plugins.hpp"
#include "backends/registry.hpp"
#include "bridge.hpp"

namespace mosaic::python {

namespace {

constexpr const char* kPythonBackend = "python";

/// op type -> the Python class (a strong reference, kept for the life of the process, and
/// replaced when the class is redefined); read with the GIL held.
std::map<std::string, PyObject*>& classes() {
  static auto* table = new std::map<std::string, PyObject*>();
  return *table;
}

py::handle class_of(const std::string& op_type) {
  auto it = classes().find(op_type);
  if (it == classes().end()) throw std::runtime_error("no Python class for operator " + op_type);
  return it->second;
}

py::dict attributes(const Node& n) {
  py::dict d;
  for (const auto& [k, a] : n.attrs) {
    switch (a.kind) {
      case Attribute::Kind::kInt: d[py::str(k)] = a.i; break;
      case Attribute::Kind::kFloat: d[py::str(k)] = a.f; break;
      case Attribute::Kind::kString: d[py::str(k)] = a.s; break;
      case Attribute::Kind::kInts: d[py::str(k)] = a.ints; break;
      case Attribute::Kind::kFloats: d[py::str(k)] = a.floats; break;
      case Attribute::Kind::kStrings: d[py::str(k)] = a.strings; break;
      default: break;  // tensors and graphs: not passed
    }
  }
  return d;
}

py::object instance(const std::string& op_type, const Node& n) { return class_of(op_type)(attributes(n)); }

py::tuple shapes(const std::vector<TensorDesc>& descs) {
  py::tuple t(descs.size());
  for (size_t i = 0; i < descs.size(); ++i) t[i] = py::tuple(py::cast(descs[i].shape));
  return t;
}

/// "Python Swish.forward" (the class's name; the library prefixes the node's). GIL held.
std::string where(const Node& n, const char* method) {
  std::string cls = n.op_type;
  auto it = classes().find(n.op_type);
  if (it != classes().end()) cls = py::str(py::handle(it->second).attr("__qualname__"));
  return "Python " + cls + "." + method;
}

/// The class's outputs: one shape per output, default the first input's.
Expected<std::vector<TensorDesc>> infer_python(const OpContext& ctx) {
  py::gil_scoped_acquire gil;
  try {
    py::object obj = instance(ctx.node->op_type, *ctx.node);
    for (size_t i = 0; i < ctx.inputs.size(); ++i)
      if (ctx.has_input(i) && ctx.inputs[i].dtype != DType::kF32)
        return Status::invalid(where(*ctx.node, "infer") + ": input " + std::to_string(i) + " is " +
                               dtype_name(ctx.inputs[i].dtype) + "; Python operators take float32");
    py::object out = obj.attr("infer")(shapes(ctx.inputs));
    std::vector<TensorDesc> descs;
    for (py::handle s : out) {
      Shape shape;
      for (py::handle d : s) shape.push_back(d.cast<int64_t>());
      for (int64_t d : shape)
        if (d < 0) return Status::invalid(where(*ctx.node, "infer") + ": a negative dimension");
      descs.emplace_back(DType::kF32, shape);
    }
    return descs;
  } catch (py::error_already_set& e) {
    return Status::invalid(where(*ctx.node, "infer") + " raised " + keep_python_error(e));
  } catch (const std::exception& e) {
    return Status::invalid(where(*ctx.node, "infer") + ": " + e.what());
  }
}

double call_flops(const OpContext& ctx, const char* method) {
  py::gil_scoped_acquire gil;
  try {
    return instance(ctx.node->op_type, *ctx.node).attr(method)(shapes(ctx.inputs), shapes(ctx.outputs)).cast<double>();
  } catch (py::error_already_set& e) {
    keep_python_error(e);
    return 0;  // FLOPs are figures, not results: a failing count reads 0 (its error is kept)
  }
}
double flops_python(const OpContext& ctx) { return call_flops(ctx, "flops"); }
std::vector<double> backward_flops_python(const OpContext& ctx) {
  const double total = call_flops(ctx, "backward_flops");
  // Split evenly over the inputs: the class gives one number.
  return std::vector<double>(ctx.inputs.size(), ctx.inputs.empty() ? 0 : total / ctx.inputs.size());
}

/// A read-only copy of a tensor for the class (which may keep it past the call).
py::array view(const Tensor& t) {
  return float_copy(t.f32(), std::vector<py::ssize_t>(t.shape().begin(), t.shape().end()), false);
}

/// Copies `value` (what the class returned for `what`) into `dst`, after checking its shape and
/// dtype; the error names the node.
Status store(py::handle value, Tensor& dst, const Node& n, const char* method, const std::string& what) {
  if (!py::isinstance<py::array>(value))
    return Status::invalid(where(n, method) + ": " + what + " is a " +
                           std::string(py::str(py::type::of(value).attr("__name__"))) + ", not a NumPy array");
  py::array a = py::reinterpret_borrow<py::array>(value);
  if (!a.dtype().is(py::dtype::of<float>()))
    return Status::invalid(where(n, method) + ": " + what + " has dtype " + std::string(py::str(a.dtype())) +
                           ", expected float32");
  Shape got(a.shape(), a.shape() + a.ndim());
  if (got != dst.shape()) {
    auto text = [](const Shape& s) {
      std::string t = "[";
      for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
      return t + "]";
    };
    return Status::invalid(where(n, method) + ": " + what + " has shape " + text(got) + ", expected " +
                           text(dst.shape()));
  }
  py::array_t<float, py::array::c_style> c = py::array_t<float, py::array::c_style>::ensure(a);
  std::memcpy(dst.f32(), c.data(), static_cast<size_t>(dst.numel()) * sizeof(float));
  return Status::ok();
}

class PyKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    py::gil_scoped_acquire gil;
    try {
      obj_ = new py::object(instance(node_->op_type, *node_));
      has_backward_ = py::hasattr(*obj_, "backward") &&
                      !py::getattr(class_of(node_->op_type), "backward").is(
                          py::module_::import("mosaic.operator").attr("Operator").attr("backward"));
    } catch (py::error_already_set& e) {
      return Status::invalid(where(*node_, "__init__") + " raised " + keep_python_error(e));
    }
    return Status::ok();
  }
  ~PyKernel() override {
    py::gil_scoped_acquire gil;
    delete obj_;
  }
  bool has_backward() const override { return has_backward_; }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    py::gil_scoped_acquire gil;
    try {
      py::tuple args(src.size());
      for (size_t i = 0; i < src.size(); ++i) args[i] = src[i] ? py::object(view(*src[i])) : py::object(py::none());
      py::object out = obj_->attr("forward")(*args);
      return store_all(out, dst, "forward", "output");
    } catch (py::error_already_set& e) {
      return Status::internal(where(*node_, "forward") + " raised " + keep_python_error(e));
    }
  }

  Status backward(const BackwardArgs& a) override {
    py::gil_scoped_acquire gil;
    try {
      auto views = [](const std::vector<const Tensor*>& ts) {
        py::tuple t(ts.size());
        for (size_t i = 0; i < ts.size(); ++i) t[i] = ts[i] ? py::object(view(*ts[i])) : py::object(py::none());
        return t;
      };
      py::object out = obj_->attr("backward")(views(a.src), views(a.dst), views(a.diff_dst));
      return store_all(out, a.diff_src, "backward", "gradient");
    } catch (py::error_already_set& e) {
      return Status::internal(where(*node_, "backward") + " raised " + keep_python_error(e));
    }
  }

 private:
  /// One array, or a tuple/list with one per destination (None where a destination is absent).
  Status store_all(py::handle out, const std::vector<Tensor*>& dst, const char* method, const std::string& what) {
    std::vector<py::handle> values;
    if (py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out)) {
      for (py::handle v : out) values.push_back(v);
    } else {
      values.push_back(out);
    }
    if (values.size() != dst.size())
      return Status::invalid(where(*node_, method) + " returned " + std::to_string(values.size()) + " " + what +
                             (values.size() == 1 ? "" : "s") + ", expected " + std::to_string(dst.size()));
    for (size_t i = 0; i < dst.size(); ++i) {
      if (!dst[i]) continue;  // not wanted (an omitted output, an input without a gradient)
      if (values[i].is_none())
        return Status::invalid(where(*node_, method) + ": " + what + " " + std::to_string(i) + " is None");
      MOSAIC_RETURN_IF_ERROR(store(values[i], *dst[i], *node_, method, what + " " + std::to_string(i)));
    }
    return Status::ok();
  }

  const Node* node_ = nullptr;
  py::object* obj_ = nullptr;  // deleted with the GIL held
  bool has_backward_ = false;
};

KernelFactory factory() { return make_factory<PyKernel>(); }

}  // namespace

void bind_operators(py::module_& m) {
  m.def(
      "_register_operator",
      [](const std::string& op_type, const std::string& domain, int inputs, int outputs, py::object cls,
         const std::string& origin, const std::string& summary) {
        const bool known = classes().count(op_type) != 0;
        if (known) {  // a redefinition: the kernels look the class up by op type
          Py_DECREF(classes()[op_type]);
          classes()[op_type] = cls.release().ptr();
          return;
        }
        Status st = register_extension(origin, "", [&](Registrar& r) -> Status {
          if (!domain.empty()) {
            OpSchema s;
            s.op_type = op_type;
            s.domain = domain;
            s.min_inputs = s.max_inputs = inputs;
            s.min_outputs = s.max_outputs = outputs;
            s.infer = infer_python;
            s.flops = flops_python;
            s.backward_flops = backward_flops_python;
            s.summary = summary;
            MOSAIC_RETURN_IF_ERROR(r.add_operator(std::move(s)));
            return BackendRegistration::extend(r, "naive").kernel(op_type, factory()).status();
          }
          // The python backend opens with its first class; later classes extend it.
          const auto backends = builtin_registry().backends();
          if (std::find(backends.begin(), backends.end(), kPythonBackend) != backends.end())
            return BackendRegistration::extend(r, kPythonBackend).kernel(op_type, factory()).status();
          BackendInfo info;
          info.name = kPythonBackend;
          info.summary = "operators written in Python (mosaic.Operator), on NumPy arrays";
          return BackendRegistration(r, std::move(info)).kernel(op_type, factory()).status();
        });
        if (!st.is_ok()) raise_status(st);
        classes()[op_type] = cls.release().ptr();
      },
      py::arg("op_type"), py::arg("domain"), py::arg("inputs"), py::arg("outputs"), py::arg("cls"), py::arg("origin"),
      py::arg("summary"));
}

}  // namespace mosaic::python
