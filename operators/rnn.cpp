// RNN, GRU and LSTM: attributes, checks, shapes and FLOPs (operators/rnn.hpp).
#include "operators/rnn.hpp"

#include <algorithm>
#include <cctype>

#include "operators/op_context.hpp"

namespace mosaic {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// One activation by its ONNX RNN name, with its alpha and beta taken from the lists in
/// order (only the activations that read them consume them), as ONNX Runtime does.
Expected<Activation> activation(const Node& n, const std::string& name, const std::vector<float>& alphas,
                                const std::vector<float>& betas, size_t* ai, size_t* bi) {
  struct Known {
    const char* name;
    UnaryOp op;
    bool alpha, beta;
    double alpha_default, beta_default;
  };
  static const Known kKnown[] = {
      {"sigmoid", UnaryOp::kSigmoid, false, false, 0, 0},   {"tanh", UnaryOp::kTanh, false, false, 0, 0},
      {"relu", UnaryOp::kRelu, false, false, 0, 0},         {"leakyrelu", UnaryOp::kLeakyRelu, true, false, 0.01, 0},
      {"hardsigmoid", UnaryOp::kHardSigmoid, true, true, 0.2, 0.5}, {"elu", UnaryOp::kElu, true, false, 1.0, 0},
      {"softsign", UnaryOp::kSoftsign, false, false, 0, 0}, {"softplus", UnaryOp::kSoftplus, false, false, 0, 0},
  };
  const std::string key = lower(name);
  for (const Known& k : kKnown) {
    if (key != k.name) continue;
    Activation a;
    a.op = k.op;
    a.args.alpha = k.alpha ? (*ai < alphas.size() ? alphas[(*ai)++] : k.alpha_default) : 0;
    a.args.beta = k.beta ? (*bi < betas.size() ? betas[(*bi)++] : k.beta_default) : 0;
    return a;
  }
  return Status::unsupported(n.label() + ": activation '" + name +
                             "' is not supported (Sigmoid, Tanh, Relu, LeakyRelu, HardSigmoid, Elu, Softsign, Softplus)");
}

std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

Expected<RnnParams> rnn_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  RnnParams p;
  if (n.op_type == "LSTM") p.cell = RnnCell::kLstm;
  else if (n.op_type == "GRU") p.cell = RnnCell::kGru;
  else if (n.op_type == "RNN") p.cell = RnnCell::kRnn;
  else return Status::invalid(n.label() + ": not a recurrent op (RNN, GRU, LSTM)");
  p.gates = p.cell == RnnCell::kLstm ? 4 : p.cell == RnnCell::kGru ? 3 : 1;
  p.acts_per_dir = p.cell == RnnCell::kLstm ? 3 : p.cell == RnnCell::kGru ? 2 : 1;
  const std::string direction = n.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return Status::invalid(n.label() + ": direction '" + direction + "' (forward, reverse or bidirectional)");
  p.dirs = direction == "bidirectional" ? 2 : 1;
  p.reverse = direction == "reverse";
  const int64_t layout = n.attr_int("layout", 0);
  if (layout != 0 && layout != 1) return Status::invalid(n.label() + ": layout " + std::to_string(layout) + " (0 or 1)");
  p.batch_first = layout == 1;
  if (p.cell == RnnCell::kLstm && n.attr_int("input_forget", 0) != 0)
    return Status::unsupported(n.label() + ": LSTM with input_forget = 1 is not supported");
  p.linear_before_reset = p.cell == RnnCell::kGru && n.attr_int("linear_before_reset", 0) != 0;
  p.clip = n.has_attr("clip") ? n.attr_float("clip", 0.f) : 0.0;
  if (n.has_attr("clip") && !(p.clip > 0)) return Status::invalid(n.label() + ": clip must be positive");

  const auto& in = ctx.inputs;
  auto need = [&](size_t i, const Shape& want, const char* what) -> Status {
    if (in[i].shape != want)
      return Status::invalid(n.label() + ": " + what + " '" + n.inputs[i] + "' is " + shape_text(in[i].shape) +
                             ", expected " + shape_text(want));
    if (i != 4 && in[i].dtype != DType::kF32)
      return Status::invalid(n.label() + ": " + what + " '" + n.inputs[i] + "' must be float32");
    return Status::ok();
  };
  if (in.size() < 3 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2))
    return Status::invalid(n.label() + ": needs X, W and R");
  if (in[0].shape.size() != 3)
    return Status::invalid(n.label() + ": X '" + n.inputs[0] + "' is " + shape_text(in[0].shape) + ", expected rank 3");
  p.seq = in[0].shape[p.batch_first ? 1 : 0];
  p.batch = in[0].shape[p.batch_first ? 0 : 1];
  p.input = in[0].shape[2];
  if (in[1].shape.size() != 3 || in[1].shape[1] % p.gates != 0)
    return Status::invalid(n.label() + ": W '" + n.inputs[1] + "' is " + shape_text(in[1].shape) + ", expected [" +
                           std::to_string(p.dirs) + ", " + std::to_string(p.gates) + " * hidden, " +
                           std::to_string(p.input) + "]");
  p.hidden = in[1].shape[1] / p.gates;
  if (n.has_attr("hidden_size") && n.attr_int("hidden_size", 0) != p.hidden)
    return Status::invalid(n.label() + ": hidden_size " + std::to_string(n.attr_int("hidden_size", 0)) +
                           " does not match W's " + std::to_string(p.hidden));
  // An empty sequence or batch is legal ONNX (Y empty; over 0 steps Y_h and Y_c are the
  // initial states); a layer of no hidden units is not a layer.
  if (p.hidden < 1) return Status::invalid(n.label() + ": hidden size 0 (W '" + n.inputs[1] + "' is " +
                                           shape_text(in[1].shape) + ")");
  const int64_t G = p.gate_width(), D = p.dirs;
  MOSAIC_RETURN_IF_ERROR(need(1, {D, G, p.input}, "W"));
  MOSAIC_RETURN_IF_ERROR(need(2, {D, G, p.hidden}, "R"));
  p.has_bias = ctx.has_input(3);
  if (p.has_bias) MOSAIC_RETURN_IF_ERROR(need(3, {D, 2 * G}, "B"));
  p.has_lens = ctx.has_input(4);
  if (p.has_lens) {
    MOSAIC_RETURN_IF_ERROR(need(4, {p.batch}, "sequence_lens"));
    if (in[4].dtype != DType::kI64 && in[4].dtype != DType::kI32)
      return Status::invalid(n.label() + ": sequence_lens '" + n.inputs[4] + "' must be an integer tensor");
  }
  // Layout 1 puts the batch first in the states too.
  const Shape state = p.batch_first ? Shape{p.batch, D, p.hidden} : Shape{D, p.batch, p.hidden};
  p.has_h0 = ctx.has_input(5);
  if (p.has_h0) MOSAIC_RETURN_IF_ERROR(need(5, state, "initial_h"));
  if (p.cell == RnnCell::kLstm) {
    p.has_c0 = ctx.has_input(6);
    if (p.has_c0) MOSAIC_RETURN_IF_ERROR(need(6, state, "initial_c"));
    p.has_peepholes = ctx.has_input(7);
    if (p.has_peepholes) MOSAIC_RETURN_IF_ERROR(need(7, {D, 3 * p.hidden}, "P"));
  }

  std::vector<std::string> names;
  if (n.has_attr("activations")) names = n.attrs.at("activations").strings;
  if (names.empty()) {
    const std::vector<std::string> defaults = p.cell == RnnCell::kLstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                              : p.cell == RnnCell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                       : std::vector<std::string>{"Tanh"};
    for (int d = 0; d < p.dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  if (names.size() != static_cast<size_t>(p.dirs * p.acts_per_dir))
    return Status::invalid(n.label() + ": " + std::to_string(names.size()) + " activations, expected " +
                           std::to_string(p.dirs * p.acts_per_dir) + " (" + std::to_string(p.acts_per_dir) +
                           " per direction)");
  const std::vector<float> alphas = n.attr_floats("activation_alpha"), betas = n.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  for (const auto& name : names) {
    MOSAIC_ASSIGN_OR_RETURN(Activation a, activation(n, name, alphas, betas, &ai, &bi));
    p.acts.push_back(a);
  }
  return p;
}

Expected<std::vector<TensorDesc>> infer_rnn(const OpContext& ctx) {
  MOSAIC_ASSIGN_OR_RETURN(const RnnParams p, rnn_params(ctx));
  const Shape y = p.batch_first ? Shape{p.batch, p.seq, p.dirs, p.hidden} : Shape{p.seq, p.dirs, p.batch, p.hidden};
  const Shape state = p.batch_first ? Shape{p.batch, p.dirs, p.hidden} : Shape{p.dirs, p.batch, p.hidden};
  std::vector<TensorDesc> out{{DType::kF32, y}, {DType::kF32, state}};
  if (p.cell == RnnCell::kLstm) out.push_back({DType::kF32, state});
  return out;
}

namespace {

/// Element-wise FLOPs of one cell update per hidden unit: bias adds, activations (their
/// table rows), the state arithmetic.
double cell_eltwise(const RnnParams& p, bool backward) {
  double acts = 0;
  for (int k = 0; k < p.acts_per_dir; ++k) {
    const UnaryOpInfo& u = unary_info(*p.act(0, k).op);
    const int uses = p.cell == RnnCell::kLstm ? (k == 0 ? 3 : 1) : p.cell == RnnCell::kGru ? (k == 0 ? 2 : 1) : 1;
    acts += uses * (backward ? u.backward_flops : u.flops);
  }
  const double state = p.cell == RnnCell::kLstm ? 4 : p.cell == RnnCell::kGru ? 5 : 0;
  return 2.0 * p.gates + acts + (backward ? 2 * state : state);
}

double steps(const RnnParams& p) { return static_cast<double>(p.seq) * p.batch * p.dirs; }

}  // namespace

double rnn_flops(const OpContext& ctx) {
  auto p = rnn_params(ctx);
  if (!p.ok()) return 0;
  const double G = static_cast<double>(p->gate_width());
  return steps(*p) * (2 * G * static_cast<double>(p->input + p->hidden) + p->hidden * cell_eltwise(*p, false));
}

std::vector<double> rnn_backward_flops(const OpContext& ctx) {
  std::vector<double> out(ctx.inputs.size(), 0.0);
  auto p = rnn_params(ctx);
  if (!p.ok()) return out;
  const double G = static_cast<double>(p->gate_width()), s = steps(*p);
  // X: dX = dG W plus the recurrence dH = dG R and the cell's derivatives (needed for any
  // gradient, counted once here); W: dW = dG^T X; R: dR = dG^T H; B: two sums; P: a product.
  out[0] = s * (2 * G * static_cast<double>(p->input + p->hidden) + p->hidden * cell_eltwise(*p, true));
  out[1] = s * 2 * G * static_cast<double>(p->input);
  out[2] = s * 2 * G * static_cast<double>(p->hidden);
  if (out.size() > 3) out[3] = s * 2 * G;
  if (out.size() > 7) out[7] = s * 6 * static_cast<double>(p->hidden);
  return out;
}

}  // namespace mosaic
