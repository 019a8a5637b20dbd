#include "validate/reference_forward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "ir/elements.hpp"
#include "backends/common/broadcast.hpp"
#include "backends/common/layer_norm.hpp"
#include "backends/common/movement.hpp"
#include "backends/common/reduce.hpp"
#include "backends/common/rnn.hpp"
#include "operators/eltwise.hpp"
#include "operators/params.hpp"

namespace mosaic {

int64_t branch_changes(const BranchRecord& a, const BranchRecord& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.codes.size() && i < b.codes.size(); ++i)
    for (size_t j = 0; j < a.codes[i].size() && j < b.codes[i].size(); ++j) n += a.codes[i][j] != b.codes[i][j];
  return n;
}

namespace {

using Codes = std::vector<int32_t>;

/// Which piece of a piecewise op x falls on: per kink, 0 below it, 1 exactly on it, 2 above,
/// summed (a value exactly on a kink, such as a Relu of a Relu's zero, stays on it when
/// perturbed and is no switch).
int32_t branch_code(const UnaryOpInfo& u, const UnaryArgs& a, double x) {
  int32_t code = 0;
  for (int k = 0; k < u.kinks; ++k) {
    const double at = u.kink(k, a);
    code += x > at ? 2 : x == at ? 1 : 0;
  }
  return code;
}

/// Applies an activation fused into Conv/Gemm (as the fusion pass writes it) in double.
double activate(const Activation& a, double x, int32_t* code) {
  if (!a.active()) return x;
  const UnaryOpInfo& u = unary_info(*a.op);
  *code = branch_code(u, a.args, x);
  return u.f(x, a.args);
}

/// sum_k x[k] y[k] over sixteen chains (two vector registers' worth), so the loop is
/// neither one long dependency nor shuffled between chains.
double dot(const double* x, const double* y, int64_t n) {
  constexpr int kChains = 16;
  double acc[kChains] = {};
  int64_t k = 0;
  for (; k + kChains <= n; k += kChains)
    for (int j = 0; j < kChains; ++j) acc[j] += x[k + j] * y[k + j];
  for (; k < n; ++k) acc[0] += x[k] * y[k];
  for (int w = kChains / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

/// Output element i of `out_shape` walks `in` through per-axis strides (0 = broadcast).
template <class F>
void each_strided(const Shape& out_shape, const std::vector<int64_t>& strides, F&& f) {
  const int64_t n = shape_numel(out_shape);
  std::vector<int64_t> idx(out_shape.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int64_t d = static_cast<int64_t>(out_shape.size()) - 1; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < out_shape[d]) break;
      off -= strides[d] * out_shape[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

struct ReferenceForward::Impl {
  struct Step {
    const Node* node = nullptr;
    KernelContext ctx;
    std::vector<int> in, out;
    std::unique_ptr<Kernel> float_kernel;  ///< ops without a double implementation
    int branch = -1;                       ///< index into the branch record
    std::vector<double> pre;               ///< a fused activation's input, per output element
    std::vector<Ambiguity> found;          ///< ambiguous decisions of its last run
    std::vector<size_t> tracked;           ///< indices into Impl::tracked
  };
  Graph graph;
  bool training = false;
  std::vector<DTensor> values;
  std::vector<TensorDesc> descs;
  std::map<std::string, int> index;
  std::vector<int> inputs, outputs;
  std::vector<Step> steps;
  std::vector<Ambiguity> tracked;
  std::vector<std::vector<double>> alternatives;  ///< per tracked decision, per option
  std::vector<double> unnudged;                   ///< a nudged element's value before (NaN: not nudged)

  const DTensor& in(const Step& s, size_t i) const { return values[s.in[i]]; }
  bool has_in(const Step& s, size_t i) const { return i < s.in.size() && s.in[i] >= 0; }
  DTensor& out(const Step& s, size_t i) {
    DTensor& t = values[s.out[i]];
    t.shape = descs[s.out[i]].shape;
    t.v.assign(static_cast<size_t>(shape_numel(t.shape)), 0.0);
    return t;
  }

  Status run_dirty(std::vector<bool> dirty, bool all, BranchRecord& record);
  Status run_step(Step& s, Codes* codes);
  void observe(Step& s, Codes* codes);
  Status conv(Step& s, Codes* codes);
  Status pool(Step& s, Codes* codes);
  Status gemm(Step& s, Codes* codes);
  Status matmul(Step& s);
  Status binary(Step& s);
  Status unary(Step& s, Codes* codes);
  Status softmax(Step& s);
  Status batch_norm(Step& s);
  Status lrn(Step& s);
  Status transpose(Step& s);
  Status axis_maps(Step& s, const std::vector<std::vector<int64_t>>& maps, double fill);
  Status concat(Step& s);
  Status rnn(Step& s);
  Status split(Step& s);
  Status select(Step& s);
  Status on_float_kernel(Step& s);
  void near_kinks(Step& s, const std::vector<double>& x, bool fused) const;
  /// Decision a's value for input x on the piece above (or below) its kink.
  double piece(const Step& s, const Ambiguity& a, bool above, double x) const;
  /// The op's attributes, with Clip's bounds as the run computed them.
  UnaryArgs args_of(const Step& s, UnaryOp op) const;
};

/// Marks a tracked element whose branch is one of its decision's options.
constexpr int32_t kTrackedCode = -2;

namespace {

bool piecewise(const Node& n) {
  const std::string op = n.op_key();
  if (const auto u = unary_op_of(op)) return unary_info(*u).kinks > 0;
  const Activation act = (op == "Conv" || op == "Gemm") ? fused_activation(n) : Activation{};
  return op == "MaxPool" || op == "GlobalMaxPool" || (act.active() && unary_info(*act.op).kinks > 0);
}

bool has_double_impl(const std::string& op) {
  if (unary_op_of(op) || binary_op_of(op) || reduce_op_of(op) || compare_op_of(op)) return true;  // the tables' rows
  static const char* kOps[] = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Gemm",
                               "MatMul", "Softmax", "LogSoftmax", "BatchNormalization", "LayerNormalization", "LRN", "Reshape", "Flatten",
                               "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose", "Slice", "Pad", "Concat",
                               "RNN", "GRU", "LSTM", "Split", "Gather", "Expand", "Where", "Not", "Cast"};
  return std::find_if(std::begin(kOps), std::end(kOps), [&](const char* o) { return op == o; }) != std::end(kOps);
}

}  // namespace

Expected<std::unique_ptr<ReferenceForward>> ReferenceForward::create(const Graph& graph, const KernelRegistry& registry,
                                                                     bool training) {
  std::unique_ptr<ReferenceForward> rf(new ReferenceForward());
  rf->impl_ = std::make_unique<Impl>();
  Impl& m = *rf->impl_;
  m.graph = graph;
  m.training = training;
  Graph& g = m.graph;
  auto value = [&](const std::string& name) -> Expected<int> {
    auto it = m.index.find(name);
    if (it != m.index.end()) return it->second;
    auto d = g.value_descs.find(name);
    if (d == g.value_descs.end()) return Status::invalid(g.source + ": value '" + name + "' has no inferred shape");
    const int id = static_cast<int>(m.values.size());
    DTensor t;
    t.shape = d->second.shape;
    auto c = g.initializers.find(name);
    if (c != g.initializers.end()) {
      if (!c->second.defined()) return Status::invalid(g.source + ": initializer '" + name + "' was released");
      t.v.resize(static_cast<size_t>(c->second.numel()));
      for (int64_t i = 0; i < c->second.numel(); ++i) t.v[i] = c->second.get(i);
    }
    m.values.push_back(std::move(t));
    m.descs.push_back(TensorDesc(d->second.dtype, d->second.shape));
    return m.index[name] = id;
  };
  for (const auto& in : g.inputs) {
    MOSAIC_ASSIGN_OR_RETURN(int v, value(in.name));
    m.values[v].v.assign(static_cast<size_t>(shape_numel(m.values[v].shape)), 0.0);
    m.inputs.push_back(v);
  }
  for (const auto& n : g.nodes) {
    Impl::Step s;
    s.node = &n;
    s.ctx.node = &n;
    s.ctx.opset = g.opset;
    s.ctx.training = training;
    for (const auto& name : n.inputs) {
      int v = -1;
      if (!name.empty()) {
        MOSAIC_ASSIGN_OR_RETURN(v, value(name));
      }
      s.in.push_back(v);
      s.ctx.inputs.push_back(v < 0 ? TensorDesc{} : m.descs[v]);
      s.ctx.input_present.push_back(v >= 0);
      auto c = name.empty() ? g.initializers.end() : g.initializers.find(name);
      s.ctx.constants.push_back(c != g.initializers.end() ? &c->second : nullptr);
    }
    for (const auto& name : n.outputs) {
      int v = -1;
      if (!name.empty()) {
        MOSAIC_ASSIGN_OR_RETURN(v, value(name));
      }
      s.out.push_back(v);
      s.ctx.outputs.push_back(v < 0 ? TensorDesc{} : m.descs[v]);
      s.ctx.output_present.push_back(v >= 0);
    }
    if (n.op_type == "Dropout" && training)
      return Status::unsupported(g.source + ": " + n.label() + ": a reference forward needs a deterministic graph");
    // Float outputs only: shape arithmetic (int64) runs on the naive kernels exactly.
    // (The first output present decides: a GRU whose Y is omitted computes its Y_h in double.)
    const auto first = std::find_if(s.out.begin(), s.out.end(), [](int v) { return v >= 0; });
    const bool float_op = first != s.out.end() && m.descs[*first].dtype == DType::kF32;
    if (!float_op || !has_double_impl(n.op_key())) {
      auto k = registry.create("naive", s.ctx);
      if (!k.ok()) return k.status().with_context(g.source);
      s.float_kernel = std::move(k.value());
      if (float_op) rf->float_nodes_.push_back("'" + n.name + "' (" + n.op_type + ")");
    }
    if (piecewise(n)) {
      s.branch = static_cast<int>(rf->branches_.nodes.size());
      rf->branches_.nodes.push_back(static_cast<int>(&n - g.nodes.data()));
      rf->branches_.codes.emplace_back();
    }
    m.steps.push_back(std::move(s));
  }
  for (const auto& out : g.outputs) {
    MOSAIC_ASSIGN_OR_RETURN(int v, value(out.name));
    m.outputs.push_back(v);
  }
  return rf;
}

ReferenceForward::~ReferenceForward() = default;

std::vector<double>* ReferenceForward::parameter(const std::string& name) {
  auto c = impl_->graph.initializers.find(name);
  if (c == impl_->graph.initializers.end() || c->second.dtype() != DType::kF32) return nullptr;
  return &impl_->values[impl_->index.at(name)].v;
}

std::vector<double>& ReferenceForward::input(size_t i) { return impl_->values[impl_->inputs.at(i)].v; }

const DTensor& ReferenceForward::output(size_t i) const { return impl_->values[impl_->outputs.at(i)]; }

Status ReferenceForward::run() { return run_from({}); }

Status ReferenceForward::run_from(const std::vector<std::string>& changed) {
  std::vector<bool> dirty(impl_->values.size(), false);
  for (const auto& name : changed) {
    auto it = impl_->index.find(name);
    if (it == impl_->index.end()) return Status::invalid("reference forward: no value named '" + name + "'");
    dirty[it->second] = true;
  }
  return impl_->run_dirty(std::move(dirty), changed.empty(), branches_);
}

Status ReferenceForward::Impl::run_dirty(std::vector<bool> dirty, bool all, BranchRecord& record) {
  for (auto& s : steps) {
    bool affected = all;
    for (int v : s.in) affected = affected || (v >= 0 && dirty[v]);
    if (!affected) continue;
    for (int v : s.out)
      if (v >= 0) dirty[v] = true;
    s.found.clear();
    Codes* codes = s.branch >= 0 ? &record.codes[s.branch] : nullptr;
    Status st = run_step(s, codes);
    if (!st.is_ok()) return st.with_context(graph.source + ": reference forward");
    observe(s, codes);
  }
  record.ambiguous = 0;
  for (const auto& s : steps) record.ambiguous += static_cast<int64_t>(s.found.size());
  return Status::ok();
}

std::vector<Ambiguity> ReferenceForward::ambiguities() const {
  std::vector<Ambiguity> all;
  for (const auto& s : impl_->steps) all.insert(all.end(), s.found.begin(), s.found.end());
  return all;
}

void ReferenceForward::track(std::vector<Ambiguity> decisions) {
  Impl& m = *impl_;
  for (auto& s : m.steps) s.tracked.clear();
  m.tracked = std::move(decisions);
  m.alternatives.assign(m.tracked.size(), {});
  m.unnudged.assign(m.tracked.size(), std::numeric_limits<double>::quiet_NaN());
  for (size_t d = 0; d < m.tracked.size(); ++d) {
    m.steps.at(static_cast<size_t>(m.tracked[d].step)).tracked.push_back(d);
    m.alternatives[d].assign(static_cast<size_t>(m.tracked[d].options()), 0.0);
  }
}

const std::vector<std::vector<double>>& ReferenceForward::alternatives() const { return impl_->alternatives; }

Status ReferenceForward::nudge(size_t d, double delta) {
  Impl& m = *impl_;
  const Ambiguity& a = m.tracked.at(d);
  const int out = m.steps[static_cast<size_t>(a.step)].out[0];
  double& y = m.values[out].v.at(static_cast<size_t>(a.element));
  double& from = m.unnudged.at(d);
  if (std::isnan(from)) from = y;
  y = from + delta;
  if (delta == 0) from = std::numeric_limits<double>::quiet_NaN();
  std::vector<bool> dirty(m.values.size(), false);
  dirty[out] = true;
  return m.run_dirty(std::move(dirty), false, branches_);
}

void ReferenceForward::Impl::observe(Step& s, Codes* codes) {
  for (size_t d : s.tracked) {
    const Ambiguity& a = tracked[d];
    std::vector<double>& alt = alternatives[d];
    const double y = values[s.out[0]].v[a.element];
    if (!a.cells.empty()) {
      const std::vector<double>& x = in(s, 0).v;
      for (size_t o = 0; o < a.cells.size(); ++o) alt[o] = x[a.plane + a.cells[o]] - y;
      if (codes && std::find(a.cells.begin(), a.cells.end(), (*codes)[a.element]) != a.cells.end())
        (*codes)[a.element] = kTrackedCode;
    } else {
      const double x = s.pre.empty() ? in(s, 0).v[a.element] : s.pre[a.element];
      alt[0] = piece(s, a, true, x) - y;
      alt[1] = piece(s, a, false, x) - y;
      if (codes) (*codes)[a.element] = kTrackedCode;
    }
  }
}

double ReferenceForward::Impl::piece(const Step& s, const Ambiguity& a, bool above, double x) const {
  const std::string op = s.node->op_key();
  if (op == "Conv" || op == "Gemm") {
    const Activation act = fused_activation(*s.node);
    return unary_info(*act.op).piece(a.kink_index, above, x, act.args);
  }
  const UnaryOp u = *unary_op_of(op);
  return unary_info(u).piece(a.kink_index, above, x, args_of(s, u));
}

UnaryArgs ReferenceForward::Impl::args_of(const Step& s, UnaryOp op) const {
  UnaryArgs args = unary_args(op, s.ctx);
  if (has_in(s, 1)) args.lo = in(s, 1).v.at(0);  // Clip's bounds computed at run time
  if (has_in(s, 2)) args.hi = in(s, 2).v.at(0);
  return args;
}

std::string Ambiguity::option_name(int option) const {
  std::string name;
  if (!cells.empty()) {
    name = "window cell at offset " + std::to_string(cells.at(static_cast<size_t>(option)));
    return name + (option == exact ? " (the exact maximum)"
                                   : " (exact arithmetic: offset " + std::to_string(cells.at(static_cast<size_t>(exact))) + ")");
  }
  name = option == 0 ? "the piece above its kink" : "the piece below its kink";
  return name + (option == exact ? " (as in exact arithmetic)" : " (exact arithmetic: the other side)");
}

Status ReferenceForward::Impl::run_step(Step& s, Codes* codes) {
  if (s.float_kernel) return on_float_kernel(s);
  const std::string op = s.node->op_key();
  if (op == "Conv") {
    MOSAIC_RETURN_IF_ERROR(conv(s, codes));
    near_kinks(s, s.pre, true);
    return Status::ok();
  }
  if (op.find("Pool") != std::string::npos) return pool(s, codes);
  if (op == "Gemm") {
    MOSAIC_RETURN_IF_ERROR(gemm(s, codes));
    near_kinks(s, s.pre, true);
    return Status::ok();
  }
  if (op == "MatMul") return matmul(s);
  if (binary_op_of(op)) return binary(s);
  if (op == "LayerNormalization") {
    MOSAIC_ASSIGN_OR_RETURN(const LayerNormParams p, layer_norm_params(s.ctx));
    auto optional_out = [&](size_t i) { return i < s.out.size() && s.out[i] >= 0 ? out(s, i).v.data() : nullptr; };
    DTensor& y = out(s, 0);
    layer_norm_forward(p, in(s, 0).v.data(), in(s, 1).v.data(), has_in(s, 2) ? in(s, 2).v.data() : nullptr,
                       y.v.data(), optional_out(1), optional_out(2));
    return Status::ok();
  }
  if (const auto r = reduce_op_of(op)) {
    MOSAIC_ASSIGN_OR_RETURN(const ReduceParams p, reduce_params(s.ctx));
    DTensor& y = out(s, 0);
    reduce_forward(reduce_info(*r), p, in(s, 0).v.data(), y.v.data());
    return Status::ok();
  }
  if (op == "Softmax" || op == "LogSoftmax") return softmax(s);
  if (op == "RNN" || op == "GRU" || op == "LSTM") return rnn(s);
  if (op == "Split") return split(s);
  if (op == "Gather" || op == "Expand" || op == "Where" || op == "Not" || op == "Cast" || compare_op_of(op))
    return select(s);
  if (op == "BatchNormalization") return batch_norm(s);
  if (op == "LRN") return lrn(s);
  if (op == "Transpose") return transpose(s);
  if (op == "Concat") return concat(s);
  if (op == "Slice") {
    MOSAIC_ASSIGN_OR_RETURN(AxisMaps maps, slice_axis_maps(s.ctx));
    return axis_maps(s, maps, 0.0);
  }
  if (op == "Pad") {
    MOSAIC_ASSIGN_OR_RETURN(PadParams p, pad_params(s.ctx));
    const double fill = p.value_at_run_time && has_in(s, 2) ? in(s, 2).v.at(0) : p.value;
    return axis_maps(s, pad_axis_maps(p, in(s, 0).shape, descs[s.out[0]].shape), fill);
  }
  if (unary_op_of(op)) {
    MOSAIC_RETURN_IF_ERROR(unary(s, codes));
    near_kinks(s, in(s, 0).v, false);
    return Status::ok();
  }
  // Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout (inference): same elements.
  out(s, 0).v = in(s, 0).v;
  if (s.out.size() > 1 && s.out[1] >= 0) std::fill(out(s, 1).v.begin(), values[s.out[1]].v.end(), 1.0);
  return Status::ok();
}

Status ReferenceForward::Impl::conv(Step& s, Codes* codes) {
  MOSAIC_ASSIGN_OR_RETURN(ConvParams p, conv_params(s.ctx));
  MOSAIC_ASSIGN_OR_RETURN(Window3 g, lift_window3(p.win, *s.node));
  const Activation act = fused_activation(*s.node);
  const std::vector<double>& x = in(s, 0).v;
  const std::vector<double>& w = in(s, 1).v;
  const double* bias = p.has_bias ? in(s, 2).v.data() : nullptr;
  DTensor& y = out(s, 0);
  if (codes) codes->assign(y.v.size(), 0);
  s.pre.assign(act.active() ? y.v.size() : 0, 0.0);
  double* pre = act.active() ? s.pre.data() : nullptr;
  const int64_t cg = p.c_per_group(), ocg = p.oc_per_group(), ksz = g.k[0] * g.k[1] * g.k[2];
  const int64_t K = cg * ksz, P = g.out_size(), groups = p.oc / ocg;
  // Each output is the dot product of its filter (K contiguous weights) with its input
  // patch. The patches of one image and group are gathered first (zeros where the window
  // leaves the input), P rows of K, so every dot product reads two contiguous rows: the
  // gradient checks spend nearly all their time here.
  std::vector<double> patches(static_cast<size_t>(P * K));
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t grp = 0; grp < groups; ++grp) {
#pragma omp parallel for schedule(static) if (P * K > 32768)
      for (int64_t o = 0; o < P; ++o) {
        const int64_t o0 = o / (g.out[1] * g.out[2]), o1 = o / g.out[2] % g.out[1], o2 = o % g.out[2];
        double* row = patches.data() + o * K;
        for (int64_t ic = 0; ic < cg; ++ic) {
          const double* xc = x.data() + (n * p.c + grp * cg + ic) * g.in_size();
          for (int64_t a = 0; a < g.k[0]; ++a) {
            const int64_t i0 = o0 * g.s[0] - g.pb[0] + a * g.d[0];
            for (int64_t b = 0; b < g.k[1]; ++b, row += g.k[2]) {
              const int64_t i1 = o1 * g.s[1] - g.pb[1] + b * g.d[1];
              if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) {
                std::fill(row, row + g.k[2], 0.0);
                continue;
              }
              const double* xr = xc + (i0 * g.in[1] + i1) * g.in[2];
              for (int64_t c = 0, i2 = o2 * g.s[2] - g.pb[2]; c < g.k[2]; ++c, i2 += g.d[2])
                row[c] = i2 >= 0 && i2 < g.in[2] ? xr[i2] : 0.0;
            }
          }
        }
      }
#pragma omp parallel for collapse(2) schedule(static) if (ocg * P * K > 32768)
      for (int64_t oc = grp * ocg; oc < (grp + 1) * ocg; ++oc)
        for (int64_t o = 0; o < P; ++o) {
          const double v = (bias ? bias[oc] : 0.0) + dot(w.data() + oc * K, patches.data() + o * K, K);
          const int64_t at = (n * p.oc + oc) * P + o;
          int32_t code = 0;
          if (pre) pre[at] = v;
          y.v[at] = activate(act, v, &code);
          if (codes) (*codes)[at] = code;
        }
    }
  return Status::ok();
}

Status ReferenceForward::Impl::pool(Step& s, Codes* codes) {
  MOSAIC_ASSIGN_OR_RETURN(PoolParams p, pool_params(s.ctx));
  MOSAIC_ASSIGN_OR_RETURN(Window3 g, lift_window3(p.win, *s.node));
  const bool is_max = s.node->op_type.find("Max") != std::string::npos;
  const std::vector<double>& x = in(s, 0).v;
  DTensor& y = out(s, 0);
  if (codes) codes->assign(y.v.size(), -1);
  for (int64_t nc = 0; nc < p.n * p.c; ++nc)
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          const double* xc = x.data() + nc * g.in_size();
          double best = -std::numeric_limits<double>::infinity(), second = best, sum = 0;
          int64_t arg = -1, count = 0;
          g.each_cell(o0, o1, o2, [&](int64_t off) {
            if (arg < 0 || xc[off] > best) {
              second = best;
              best = xc[off];
              arg = off;
            } else if (xc[off] > second) {
              second = xc[off];
            }
            sum += xc[off];
            ++count;
          });
          const int64_t o = nc * g.out_size() + (o0 * g.out[1] + o1) * g.out[2] + o2;
          if (is_max) {
            y.v[o] = best;
            if (codes) (*codes)[o] = static_cast<int32_t>(arg);
            const double band = std::ldexp(std::fabs(best), -16);
            if (best != second && best - second <= band) {
              Ambiguity a;
              a.step = static_cast<int>(s.node - graph.nodes.data());
              a.element = o;
              a.value = best;
              a.band = band;
              a.plane = nc * g.in_size();
              g.each_cell(o0, o1, o2, [&](int64_t off) {
                if (off == arg) a.exact = static_cast<int>(a.cells.size());
                if (best - xc[off] <= band) a.cells.push_back(off);
              });
              a.where = "'" + s.node->name + "' (" + s.node->op_type + ") output [" + std::to_string(o) + "]";
              s.found.push_back(std::move(a));
            }
          } else {
            y.v[o] = sum / static_cast<double>(p.count_include_pad ? g.padded_cells(o0, o1, o2) : count);
          }
        }
  if (s.out.size() > 1 && s.out[1] >= 0) return Status::unsupported(s.node->label() + ": MaxPool Indices output");
  return Status::ok();
}

Status ReferenceForward::Impl::gemm(Step& s, Codes* codes) {
  MOSAIC_ASSIGN_OR_RETURN(GemmParams p, gemm_params(s.ctx));
  const Activation act = fused_activation(*s.node);
  const std::vector<double>& a = in(s, 0).v;
  const std::vector<double>& b = in(s, 1).v;
  const Shape cs = p.has_c ? in(s, 2).shape : Shape{};
  const int64_t cm = cs.size() == 2 ? cs[0] : 1, cn = cs.empty() ? 1 : cs.back();
  DTensor& y = out(s, 0);
  if (codes) codes->assign(y.v.size(), 0);
  s.pre.assign(act.active() ? y.v.size() : 0, 0.0);
  double* pre = act.active() ? s.pre.data() : nullptr;
  // Rows of op(A) and columns of op(B), each contiguous, so every output is a dot product of
  // two contiguous rows (a strided operand made this loop 80% of a gradient check).
  std::vector<double> at, bt;
  const double* arows = a.data();
  const double* bcols = b.data();
  if (p.trans_a) {
    at.resize(static_cast<size_t>(p.m * p.k));
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t i = 0; i < p.m; ++i) at[i * p.k + k] = a[k * p.m + i];
    arows = at.data();
  }
  if (!p.trans_b) {
    bt.resize(static_cast<size_t>(p.n * p.k));
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t j = 0; j < p.n; ++j) bt[j * p.k + k] = b[k * p.n + j];
    bcols = bt.data();
  }
  // Column-major over the outputs: a column of op(B) (a Linear layer's weight row) is read
  // from memory once and reused from cache for every row of A (the batch).
  // Small products run on one thread: a parallel region per tiny Gemm costs more than it
  // saves, and with another busy process on the cores its barrier can spin for seconds.
#pragma omp parallel for schedule(static) if (p.m * p.n * p.k > 32768)
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      double v = static_cast<double>(p.alpha) * dot(arows + i * p.k, bcols + j * p.k, p.k);
      if (p.has_c) v += static_cast<double>(p.beta) * in(s, 2).v[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
      int32_t code = 0;
      if (pre) pre[i * p.n + j] = v;
      y.v[i * p.n + j] = activate(act, v, &code);
      if (codes) (*codes)[i * p.n + j] = code;
    }
  return Status::ok();
}

Status ReferenceForward::Impl::matmul(Step& s) {
  MOSAIC_ASSIGN_OR_RETURN(MatMulParams p, matmul_params(in(s, 0).shape, in(s, 1).shape));
  const std::vector<double>& a = in(s, 0).v;
  const std::vector<double>& b = in(s, 1).v;
  DTensor& y = out(s, 0);
  for_each_matmul_batch(p, [&](int64_t bi, int64_t oa, int64_t ob) {
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < p.k; ++k) acc += a[(oa * p.m + i) * p.k + k] * b[(ob * p.k + k) * p.n + j];
        y.v[(bi * p.m + i) * p.n + j] = acc;
      }
  });
  return Status::ok();
}

Status ReferenceForward::Impl::binary(Step& s) {
  const auto f = binary_info(*binary_op_of(s.node->op_key())).f;
  DTensor& y = out(s, 0);
  const auto sa = broadcast_strides(in(s, 0).shape, y.shape), sb = broadcast_strides(in(s, 1).shape, y.shape);
  const std::vector<double>& a = in(s, 0).v;
  const std::vector<double>& b = in(s, 1).v;
  std::vector<int64_t> offs(y.v.size());
  each_strided(y.shape, sb, [&](int64_t i, int64_t off) { offs[i] = off; });
  each_strided(y.shape, sa, [&](int64_t i, int64_t off) {
    const double u = a[off], v = b[offs[i]];
    y.v[i] = f(u, v);
  });
  return Status::ok();
}

Status ReferenceForward::Impl::unary(Step& s, Codes* codes) {
  const UnaryOp op = *unary_op_of(s.node->op_key());
  const UnaryOpInfo& u = unary_info(op);
  const UnaryArgs args = args_of(s, op);
  const std::vector<double>& x = in(s, 0).v;
  DTensor& y = out(s, 0);
  if (codes) codes->assign(y.v.size(), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    y.v[i] = u.f(x[i], args);
    if (codes) (*codes)[i] = branch_code(u, args, x[i]);
  }
  return Status::ok();
}

Status ReferenceForward::Impl::softmax(Step& s) {
  MOSAIC_ASSIGN_OR_RETURN(SoftmaxParams p, softmax_params(s.ctx));
  const bool log = s.node->op_type == "LogSoftmax";
  const std::vector<double>& x = in(s, 0).v;
  DTensor& y = out(s, 0);
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      const int64_t base = o * p.axis_dim * p.inner + i;
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t a = 0; a < p.axis_dim; ++a) mx = std::max(mx, x[base + a * p.inner]);
      for (int64_t a = 0; a < p.axis_dim; ++a) sum += std::exp(x[base + a * p.inner] - mx);
      for (int64_t a = 0; a < p.axis_dim; ++a) {
        const double v = x[base + a * p.inner] - mx;
        y.v[base + a * p.inner] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return Status::ok();
}

Status ReferenceForward::Impl::batch_norm(Step& s) {
  const BatchNormParams p = batch_norm_params(*s.node, in(s, 0).shape);
  const int64_t n = p.batch, c = p.channels, sp = p.spatial;
  const double eps = p.epsilon;
  const std::vector<double>& x = in(s, 0).v;
  const std::vector<double>& scale = in(s, 1).v;
  const std::vector<double>& shift = in(s, 2).v;
  DTensor& y = out(s, 0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = in(s, 3).v[ch], var = in(s, 4).v[ch];
    if (training) {  // the batch's mean and biased variance
      double sum = 0, sq = 0;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < sp; ++i) sum += x[(b * c + ch) * sp + i];
      mean = sum / static_cast<double>(n * sp);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < sp; ++i) sq += (x[(b * c + ch) * sp + i] - mean) * (x[(b * c + ch) * sp + i] - mean);
      var = sq / static_cast<double>(n * sp);
    }
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < sp; ++i) {
        const int64_t o = (b * c + ch) * sp + i;
        y.v[o] = scale[ch] * (x[o] - mean) * inv + shift[ch];
      }
  }
  return Status::ok();
}

Status ReferenceForward::Impl::lrn(Step& s) {
  MOSAIC_ASSIGN_OR_RETURN(LrnParams p, lrn_params(s.ctx));
  const Shape& xs = in(s, 0).shape;
  const int64_t n = xs[0], c = xs[1], sp = shape_numel(xs) / std::max<int64_t>(n * c, 1);
  const int64_t lo = (p.size - 1) / 2, hi = p.size - 1 - lo;
  const std::vector<double>& x = in(s, 0).v;
  DTensor& y = out(s, 0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < sp; ++i) {
        double sq = 0;
        for (int64_t j = std::max<int64_t>(0, ch - lo); j <= std::min(c - 1, ch + hi); ++j)
          sq += x[(b * c + j) * sp + i] * x[(b * c + j) * sp + i];
        const int64_t o = (b * c + ch) * sp + i;
        y.v[o] = x[o] / std::pow(double(p.bias) + double(p.alpha) / double(p.size) * sq, double(p.beta));
      }
  return Status::ok();
}

Status ReferenceForward::Impl::transpose(Step& s) {
  MOSAIC_ASSIGN_OR_RETURN(auto perm, transpose_perm(s.ctx));
  const auto st = row_major_strides(in(s, 0).shape);
  std::vector<int64_t> strides;
  for (int64_t a : perm) strides.push_back(st[a]);
  const std::vector<double>& x = in(s, 0).v;
  DTensor& y = out(s, 0);
  each_strided(y.shape, strides, [&](int64_t i, int64_t off) { y.v[i] = x[off]; });
  return Status::ok();
}

/// Gather, Expand, Where, the comparisons, Not and Cast in double: the selections move the
/// values unrounded (a model's last Gather would otherwise round every output to float).
Status ReferenceForward::Impl::select(Step& s) {
  const std::string op = s.node->op_key();
  DTensor& y = out(s, 0);
  const std::vector<double>& x = in(s, 0).v;
  if (op == "Gather") {
    const Shape& xs = in(s, 0).shape;
    MOSAIC_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(s.node->attr_int("axis", 0),
                                                               static_cast<int64_t>(xs.size()), *s.node));
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= xs[i];
    for (size_t i = static_cast<size_t>(axis) + 1; i < xs.size(); ++i) inner *= xs[i];
    const int64_t d = xs[static_cast<size_t>(axis)];
    const std::vector<double>& idx = in(s, 1).v;
    size_t at = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (double v : idx) {
        int64_t i = static_cast<int64_t>(v);
        if (i < 0) i += d;
        if (i < 0 || i >= d) return Status::invalid(s.node->label() + ": index " + std::to_string(v) + " out of range");
        std::copy(x.begin() + (o * d + i) * inner, x.begin() + (o * d + i + 1) * inner, y.v.begin() + at);
        at += static_cast<size_t>(inner);
      }
  } else if (op == "Expand") {
    each_broadcast<1>(y.shape, {in(s, 0).shape}, [&](int64_t i, const std::array<int64_t, 1>& o) { y.v[i] = x[o[0]]; });
  } else if (op == "Where") {
    const std::vector<double>&a = in(s, 1).v, &b = in(s, 2).v;
    each_broadcast<3>(y.shape, {in(s, 0).shape, in(s, 1).shape, in(s, 2).shape},
                      [&](int64_t i, const std::array<int64_t, 3>& o) { y.v[i] = x[o[0]] != 0 ? a[o[1]] : b[o[2]]; });
  } else if (const auto c = compare_op_of(op)) {
    const auto f = compare_info(*c).f;
    const std::vector<double>& b = in(s, 1).v;
    each_broadcast<2>(y.shape, {in(s, 0).shape, in(s, 1).shape},
                      [&](int64_t i, const std::array<int64_t, 2>& o) { y.v[i] = f(x[o[0]], b[o[1]]) ? 1.0 : 0.0; });
  } else if (op == "Not") {
    for (size_t i = 0; i < x.size(); ++i) y.v[i] = x[i] != 0 ? 0.0 : 1.0;
  } else {  // Cast: a float keeps its value; an integer truncates toward zero and wraps to its width; bool is nonzero
    const DType to = descs[s.out[0]].dtype;
    for (size_t i = 0; i < x.size(); ++i) {
      if (dtype_is_float(to)) {
        y.v[i] = x[i];
        continue;
      }
      alignas(8) unsigned char one[8];
      store_f64(to, one, 0, x[i]);
      y.v[i] = load_f64(to, one, 0);
    }
  }
  return Status::ok();
}

/// Split: output i is the slab of every outer index at its offset (Concat's inverse).
Status ReferenceForward::Impl::split(Step& s) {
  MOSAIC_ASSIGN_OR_RETURN(const SplitParams p, split_params(s.ctx));
  const std::vector<double>& x = in(s, 0).v;
  const Shape& shape = in(s, 0).shape;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < p.axis; ++i) outer *= shape[i];
  for (size_t i = static_cast<size_t>(p.axis) + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t d = shape[static_cast<size_t>(p.axis)];
  int64_t offset = 0;
  for (size_t k = 0; k < p.sizes.size(); ++k) {
    if (k < s.out.size() && s.out[k] >= 0) {
      DTensor& y = out(s, k);
      const int64_t chunk = p.sizes[k] * inner;
      for (int64_t o = 0; o < outer; ++o)
        std::copy(x.begin() + (o * d + offset) * inner, x.begin() + (o * d + offset) * inner + chunk,
                  y.v.begin() + o * chunk);
    }
    offset += p.sizes[k];
  }
  return Status::ok();
}

/// The recurrence of backends/common/rnn.hpp in double, with loop products.
Status ReferenceForward::Impl::rnn(Step& s) {
  MOSAIC_ASSIGN_OR_RETURN(const RnnParams p, rnn_params(s.ctx));
  auto input = [&](size_t i) { return has_in(s, i) ? in(s, i).v.data() : nullptr; };
  auto output = [&](size_t i) { return i < s.out.size() && s.out[i] >= 0 ? out(s, i).v.data() : nullptr; };
  std::vector<int64_t> lens;
  if (has_in(s, 4))
    for (double v : in(s, 4).v) lens.push_back(static_cast<int64_t>(v));
  RnnIO<double> io;
  io.x = input(0);
  io.w = input(1);
  io.r = input(2);
  io.b = input(3);
  io.lens = lens.empty() ? nullptr : lens.data();
  io.h0 = input(5);
  io.c0 = input(6);
  io.p = input(7);
  MOSAIC_RETURN_IF_ERROR(check_rnn_lens(p, io.lens, s.node->label()));
  io.y = output(0);
  io.yh = output(1);
  io.yc = output(2);
  RnnTape<double> tape;
  rnn_forward(p, io, tape, loop_gemm<double>);
  return Status::ok();
}

/// Output index (o_0, ..., o_r) reads input (maps[0][o_0], ...), or `fill` where any map is -1.
Status ReferenceForward::Impl::axis_maps(Step& s, const std::vector<std::vector<int64_t>>& maps, double fill) {
  const std::vector<double>& x = in(s, 0).v;
  const auto st = row_major_strides(in(s, 0).shape);
  DTensor& y = out(s, 0);
  const size_t r = y.shape.size();
  std::vector<int64_t> idx(r, 0);
  for (size_t i = 0; i < y.v.size(); ++i) {
    int64_t off = 0;
    bool inside = true;
    for (size_t a = 0; a < r && inside; ++a) {
      const int64_t m = maps[a][idx[a]];
      inside = m >= 0;
      off += m * st[a];
    }
    y.v[i] = inside ? x[off] : fill;
    for (int64_t a = static_cast<int64_t>(r) - 1; a >= 0; --a) {
      if (++idx[a] < y.shape[a]) break;
      idx[a] = 0;
    }
  }
  return Status::ok();
}

Status ReferenceForward::Impl::concat(Step& s) {
  DTensor& y = out(s, 0);
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(s.node->attr_int("axis", 0),
                                                       static_cast<int64_t>(y.shape.size()), *s.node));
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= y.shape[i];
  size_t at = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t i = 0; i < s.in.size(); ++i) {
      const std::vector<double>& x = in(s, i).v;
      const size_t chunk = x.size() / static_cast<size_t>(std::max<int64_t>(outer, 1));
      std::copy(x.begin() + o * chunk, x.begin() + (o + 1) * chunk, y.v.begin() + at);
      at += chunk;
    }
  return Status::ok();
}

/// Elements of a piecewise op's input (or a fused activation's, given its input) within 2^-16
/// of the node's RMS of a kink of the op's row.
void ReferenceForward::Impl::near_kinks(Step& s, const std::vector<double>& x, bool fused) const {
  const std::string op = s.node->op_key();
  std::optional<UnaryOp> u;
  UnaryArgs args;
  if (fused) {
    const Activation a = fused_activation(*s.node);
    u = a.op;
    args = a.args;
  } else {
    u = unary_op_of(op);
    if (u) args = args_of(s, *u);
  }
  if (!u || unary_info(*u).kinks == 0) return;
  const UnaryOpInfo& info = unary_info(*u);
  std::vector<double> kinks;
  for (int k = 0; k < info.kinks; ++k) kinks.push_back(info.kink(k, args));
  double sq = 0;
  for (double v : x) sq += v * v;
  const double band = std::ldexp(std::sqrt(sq / std::max<size_t>(x.size(), 1)), -16);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    int nearest = 0;
    for (int k = 1; k < info.kinks; ++k)
      if (std::fabs(v - kinks[k]) < std::fabs(v - kinks[nearest])) nearest = k;
    const double gap = std::fabs(v - kinks[nearest]);
    if (gap == 0 || gap > band) continue;
    Ambiguity a;
    a.step = static_cast<int>(s.node - graph.nodes.data());
    a.element = static_cast<int64_t>(i);
    a.value = values[s.out[0]].v[i];
    a.band = band;
    a.kink = kinks[nearest];
    a.kink_index = nearest;
    a.exact = v > a.kink ? 0 : 1;  // option 0: the piece above the kink
    a.where = "'" + s.node->name + "' (" + s.node->op_type + (fused ? " + fused activation" : "") + ") output [" +
              std::to_string(i) + "]";
    s.found.push_back(std::move(a));
  }
}


/// An op without a double implementation: inputs rounded to their dtype, the naive kernel,
/// outputs widened back.
Status ReferenceForward::Impl::on_float_kernel(Step& s) {
  std::vector<Tensor> srcs(s.in.size()), dsts(s.out.size());
  std::vector<const Tensor*> src;
  std::vector<Tensor*> dst;
  for (size_t i = 0; i < s.in.size(); ++i) {
    if (s.in[i] < 0) {
      src.push_back(nullptr);
      continue;
    }
    srcs[i] = Tensor::empty(descs[s.in[i]]);
    const std::vector<double>& v = values[s.in[i]].v;
    for (size_t e = 0; e < v.size(); ++e) store_f64(srcs[i].dtype(), srcs[i].data(), static_cast<int64_t>(e), v[e]);
    src.push_back(&srcs[i]);
  }
  for (size_t i = 0; i < s.out.size(); ++i) {
    if (s.out[i] < 0) {
      dst.push_back(nullptr);
      continue;
    }
    dsts[i] = Tensor::empty(descs[s.out[i]]);
    dst.push_back(&dsts[i]);
  }
  if (s.float_kernel->aliases_input()) dsts[0] = srcs[0].reshaped(descs[s.out[0]].shape);
  else MOSAIC_RETURN_IF_ERROR(s.float_kernel->forward(src, dst));
  for (size_t i = 0; i < s.out.size(); ++i)
    if (s.out[i] >= 0) {
      DTensor& y = out(s, i);
      for (size_t e = 0; e < y.v.size(); ++e) y.v[e] = dsts[i].get(static_cast<int64_t>(e));
    }
  return Status::ok();
}

}  // namespace mosaic
