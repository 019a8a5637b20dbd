// The recurrent ops RNN, GRU and LSTM, defined once (ONNX semantics): what a node asks for
// (RnnParams: sizes, directions, layout, activations, clip, GRU's linear_before_reset, the
// optional inputs present), its shape inference and its FLOPs. The arithmetic is
// backends/common/rnn.hpp, shared by naive, im2col and gradcheck's double reference.
//
// Inputs: X, W, R, [B], [sequence_lens], [initial_h], LSTM also [initial_c], [P].
// Outputs: [Y], [Y_h], LSTM also [Y_c].
// Gate order in W, R and B: LSTM i, o, f, c; GRU z, r, h; RNN one gate. P holds LSTM's
// peepholes i, o, f.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/status.hpp"
#include "operators/params.hpp"

namespace mosaic {

enum class RnnCell { kRnn, kGru, kLstm };

struct RnnParams {
  RnnCell cell = RnnCell::kLstm;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  int dirs = 1;
  bool reverse = false;      ///< direction "reverse": one direction, last step first
  bool batch_first = false;  ///< layout 1: X [batch, seq, input], Y [batch, seq, dirs, hidden]
  int gates = 4;             ///< LSTM 4, GRU 3, RNN 1
  /// f, g[, h] per direction: acts[d * acts_per_dir + k] (LSTM 3, GRU 2, RNN 1).
  std::vector<Activation> acts;
  int acts_per_dir = 3;
  double clip = 0;  ///< > 0: the inputs of f and g are clipped to [-clip, clip]
  bool linear_before_reset = false;  ///< GRU: r (.) (H R_h^T + Rb_h) instead of (r (.) H) R_h^T
  bool has_bias = false, has_lens = false, has_h0 = false, has_c0 = false, has_peepholes = false;

  int64_t gate_width() const { return gates * hidden; }
  const Activation& act(int dir, int k) const { return acts[static_cast<size_t>(dir * acts_per_dir + k)]; }
};

/// Checks the node against ONNX's rules (shapes of every input, hidden_size, direction,
/// layout, activations) and resolves the activations. Unsupported: LSTM's input_forget,
/// the activations Affine, ScaledTanh and ThresholdedRelu (named in the error).
Expected<RnnParams> rnn_params(const OpContext& ctx);

/// Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]), Y_h and Y_c
/// [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]).
Expected<std::vector<TensorDesc>> infer_rnn(const OpContext& ctx);
/// Per step and direction: the two products X W^T and H R^T (2 B G H (I + H)) plus the
/// cell's element-wise work (docs/metrics.md).
double rnn_flops(const OpContext& ctx);
/// Per input: X gets the products back through W and R (the recurrence) and the cell's
/// derivatives, W and R their weight products, B a sum, P a product per step.
std::vector<double> rnn_backward_flops(const OpContext& ctx);

}  // namespace mosaic
