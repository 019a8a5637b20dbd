// A Python optimizer class as a Mosaic optimizer: registered through register_optimizer
// (core/optimizer.hpp), the way C++ plugins are, so that make_optimizer, optcheck and train
// use it like any other. Each update hands the class NumPy copies of the parameter, its
// gradient (read-only) and its state buffers, and copies the parameter and the state back:
// the class may keep an array past the step (and past train(), which frees the parameter), so
// it never gets a view of Mosaic's memory. After the step the arrays are read-only.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <stdexcept>

#include "bridge.hpp"
#include "core/optimizer.hpp"

namespace mosaic::python {

namespace {

py::dict config_dict(const OptimizerConfig& c) {
  py::dict d;
  d["lr"] = c.lr;
  d["momentum"] = c.momentum;
  d["dampening"] = c.dampening;
  d["nesterov"] = c.nesterov;
  d["weight_decay"] = c.weight_decay;
  d["beta1"] = c.beta1;
  d["beta2"] = c.beta2;
  d["eps"] = c.eps;
  d["alpha"] = c.alpha;
  d["lr_decay"] = c.lr_decay;
  d["initial_accumulator_value"] = c.initial_accumulator_value;
  for (const auto& [k, v] : c.extra) d[py::str(k)] = v;
  return d;
}

std::vector<std::string> string_list(py::handle cls, const char* attr) {
  std::vector<std::string> out;
  if (!py::hasattr(cls, attr)) return out;
  for (py::handle v : cls.attr(attr)) out.push_back(py::str(v));
  return out;
}

class PyOptimizer final : public Optimizer {
 public:
  PyOptimizer(const OptimizerConfig& c, std::string name, py::handle cls) : Optimizer(c), name_(std::move(name)) {
    py::gil_scoped_acquire gil;
    try {
      state_names_ = string_list(cls, "state_names");
      extra_keys_ = string_list(cls, "hyperparameters");
      obj_ = new py::object(cls(config_dict(c)));
      lr_ = c.lr;
      for (size_t k = 0; k < state_names_.size(); ++k)
        initial_.push_back(obj_->attr("initial_state")(state_names_[k]).cast<float>());
    } catch (py::error_already_set& e) {
      throw std::runtime_error(keep_python_error(e));
    }
  }
  ~PyOptimizer() override {
    py::gil_scoped_acquire gil;
    delete obj_;
  }
  std::string name() const override { return name_; }
  std::vector<std::string> state_names() const override { return state_names_; }
  float initial_state(size_t k) const override { return k < initial_.size() ? initial_[k] : 0.f; }
  std::vector<std::string> extra_keys() const override { return extra_keys_; }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& state, int64_t t) override {
    py::gil_scoped_acquire gil;
    try {
      if (config_.lr != lr_) {  // a learning-rate schedule moved it
        lr_ = config_.lr;
        obj_->attr("lr") = lr_;
      }
      // Copies in and out (docs/python.md): the class may keep its arrays past the step, and
      // the parameter's memory is freed when train() returns. Afterwards they are read-only.
      py::dict st;
      std::vector<py::array> states;
      for (size_t k = 0; k < state.size() && k < state_names_.size(); ++k) {
        states.push_back(float_copy(state[k].data(), {n}, true));
        st[py::str(state_names_[k])] = states.back();
      }
      py::array pa = float_copy(p, {n}, true), ga = float_copy(g, {n}, false);
      obj_->attr("step")(pa, ga, st, t);
      std::memcpy(p, pa.data(), static_cast<size_t>(n) * sizeof(float));
      seal(pa);
      for (size_t k = 0; k < states.size(); ++k) {
        std::memcpy(state[k].data(), states[k].data(), static_cast<size_t>(n) * sizeof(float));
        seal(states[k]);
      }
    } catch (py::error_already_set& e) {
      throw std::runtime_error(keep_python_error(e));
    }
  }

 private:
  std::string name_;
  std::vector<std::string> state_names_, extra_keys_;
  std::vector<float> initial_;
  py::object* obj_ = nullptr;  // deleted with the GIL held
  double lr_ = 0;
};

}  // namespace

void bind_optimizers(py::module_& m) {
  m.def(
      "_register_optimizer",
      [](const std::string& name, py::object cls, const std::string& origin) {
        // The class stays alive as long as the process: the package keeps it in its table,
        // and a redefinition replaces both.
        PyObject* raw = cls.release().ptr();
        Status st = register_optimizer(
            name,
            [name, raw](const OptimizerConfig& c) -> std::unique_ptr<Optimizer> {
              return std::make_unique<PyOptimizer>(c, name, py::handle(raw));
            },
            origin, /*replace=*/origin.rfind("python:", 0) == 0);
        if (!st.is_ok()) raise_status(st);
      },
      py::arg("name"), py::arg("cls"), py::arg("origin"));
  m.def("optimizers", &optimizer_names, "Every optimizer name make_optimizer knows: built-ins, then registered ones.");
}

}  // namespace mosaic::python
