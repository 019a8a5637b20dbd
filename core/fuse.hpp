// Graph optimisation applied at plan time (not to the naive reference): exact rewrites that
// remove memory passes frameworks spend on separate small ops.
//  - Pad(constant 0, spatial) -> Conv: the padding is folded into the Conv's pads; into
//    AveragePool's (counted: count_include_pad) and, in inference plans, into MaxPool's
//    where the Pad's input is never negative (a ReLU's), so that MaxPool's -inf padding
//    gives the maxima the zeros gave.
//  - Conv/Gemm -> an element-wise op its table row marks fusable (Relu, LeakyRelu, Clip with
//    constant bounds; operators/eltwise.hpp): the activation is fused into the producer as
//    the internal attribute "mosaic.activation" with its resolved attributes
//    ("mosaic.alpha", "mosaic.min", ...; operators/params.hpp reads them back as an
//    Activation). Every backend applies it in the producer's epilogue.
//  - Conv -> BatchNormalization in inference plans, every parameter a constant: the
//    normalisation is folded into new weights and bias of the convolution (computed in
//    double; an activation after it then fuses into the same Conv).
//  - PyTorch's LayerNorm decomposition below opset 17 -> one LayerNormalization
//    (core/fuse_layer_norm.cpp).
//  - The RMSNorm decompositions of today's decoders (Llama, Mistral, Qwen2, T5) -> one
//    RMSNormalization, in inference plans where the node's backend has the kernel
//    (core/fuse_layer_norm.cpp).
//  - SiLU written as x * Sigmoid(x) -> one Swish, where the node's backend has the
//    kernel; a Conv or Gemm before it then takes it as its activation.
//  - PyTorch's GELU decompositions (erf and tanh forms) -> one Gelu (core/fuse_gelu.cpp).
//  - A Linear layer's MatMul(X, W) + Add(bias), W and the bias constants -> one Gemm, X's
//    leading axes as rows by a Reshape view either side (core/fuse_linear.cpp), so the bias
//    and then an activation after it (a transformer's GELU) run in the product's epilogue.
//  - Scaled dot-product attention (MatMul, scale, mask add, Softmax, MatMul) -> one
//    FusedAttention node, for the nodes FuseOptions::attention accepts (a backend with the
//    kernel; core/fuse_attention.cpp). Inference only: the node has no backward.
//  - A QDQ model's DequantizeLinear -> Conv (MatMul) -> QuantizeLinear, its weights folded
//    from the model's int8 codes, -> one QLinearConv (QLinearMatMul) on those codes, where
//    FuseOptions::integer accepts it (core/fuse_qdq.cpp). Inference only.
//  - Then a QDQ model's float stretches between its integer ops (DequantizeLinear -> Relu ->
//    Pad -> MaxPool -> QuantizeLinear) -> a CodeLookup of the codes and the Pad and MaxPool on
//    codes, exactly, where FuseOptions::integer accepts them (core/fuse_qdq_codes.cpp).
//  - A dynamically quantised model's MatMulInteger -> Cast -> Mul(a_scale * b_scale)
//    [-> Add(bias)] -> one com.microsoft MatMulIntegerToFloat, where FuseOptions::integer
//    accepts it (core/fuse_dynamic.cpp). Inference only.
// A rewrite happens only when the intermediate value has one consumer and is not a graph
// output. Fused nodes are named "a+b" so reports show what was merged.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace mosaic {

class KernelRegistry;

struct FuseReport {
  std::vector<std::string> fused;  ///< names of the fused nodes, e.g. "conv1+relu1"
  /// Relu -> MaxPool pairs run as MaxPool -> Relu (FuseOptions::pool_before_relu), e.g.
  /// "pool1 before relu1".
  std::vector<std::string> reordered;
};

struct FuseOptions {
  /// Fuse activations into Conv/Gemm. Training plans fold only the padding: their kernels
  /// have no backward for a fused activation.
  bool activations = true;
  /// Run a Relu whose output only a MaxPool reads after the pool instead (exact, forward
  /// and backward: core/fuse_relu_pool.cpp), so that it passes over the pooled tensor.
  /// Training plans, where Relu is a node of its own with a backward; inference plans fuse
  /// it into the Conv before it instead.
  bool pool_before_relu = false;
  /// Fold an inference BatchNormalization into the Conv before it. Training plans, and plans
  /// whose weights are replaced after fusion (an evaluation plan sharing a training plan's
  /// parameter buffers), must turn it off: the folded weights are copies.
  bool batch_norm = true;
  /// Recognise PyTorch's pre-opset-17 LayerNorm decomposition (ReduceMean, Sub, Pow,
  /// ReduceMean, Add, Sqrt, Div [, Mul, Add]) as one LayerNormalization node, in inference
  /// and training plans alike (every backend differentiates it).
  bool layer_norm = true;
  /// Recognise the erf and tanh GELU decompositions PyTorch exports as one Gelu node
  /// (inference and training: every backend differentiates Gelu).
  bool gelu = true;
  /// Which candidate RMSNormalization nodes to create from the RMSNorm decompositions (Pow,
  /// ReduceMean, Add, Sqrt, Div or Reciprocal and Mul [, Cast, Mul by a scale]; empty:
  /// none). Like attention: where the backend that will run the node has the kernel, in
  /// inference plans (RMSNormalization has no backward).
  std::function<bool(const Node& fused)> rms_norm;
  /// Which candidate Swish nodes to create from SiLU written as x * Sigmoid(x) (empty: none):
  /// where every backend that will run the node has a Swish kernel, in inference and
  /// training plans alike (Swish differentiates like any row of the element-wise table).
  std::function<bool(const Node& fused)> swish;
  /// Which candidate FusedAttention nodes to create (empty: none). The caller decides from
  /// the placement: a node is fused only where the backend that will run it has the kernel
  /// (fuse_options_for). Inference plans only.
  std::function<bool(const Node& fused)> attention;
  /// Which candidate Gemm nodes to make of a MatMul by constant weights and the Add of a
  /// constant bias after it (empty: none; core/fuse_linear.cpp). Inference plans: the
  /// activation that may then fuse into the Gemm has no backward.
  std::function<bool(const Node& fused)> linear;
  /// Which QDQ groups to make integer ops of (empty: none; core/fuse_qdq.cpp): where the
  /// backend that will run the fused node takes it, asked with the node's descriptors and
  /// constants in the graph (where_accepted). Inference plans.
  std::function<bool(const Graph& graph, const Node& fused)> integer;
  /// The registry whose naive backend computes the tables of a QDQ model's float stretches
  /// made code lookups (core/fuse_qdq_codes.cpp), with `integer` deciding where (null: none).
  const KernelRegistry* oracle = nullptr;
  /// Whether two nodes must stay apart because the placement runs them on different backends
  /// (empty: never): a node that a rule of its own (`Relu=naive`, `@relu1=python`) places on
  /// another backend than its producer is not fused into it, instead of vanishing into an
  /// onednn convolution. A consumer placed by the default only follows its producer.
  std::function<bool(const Node& producer, const Node& consumer)> apart;
};

struct Placement;

/// A fusion's filter (FuseOptions::attention, rms_norm, swish): the fused node is made where
/// every one of `placements` runs it on a backend with a kernel for `op`.
std::function<bool(const Node&)> where_kernel(std::vector<Placement> placements, const KernelRegistry& registry,
                                             std::string op);
/// A fusion's filter that asks each of `placements`' backend for the fused node whether it
/// takes the node as it stands in the graph (KernelRegistry::query on its descriptors and
/// constants): every one of them must.
std::function<bool(const Graph&, const Node&)> where_accepted(std::vector<Placement> placements,
                                                              const KernelRegistry& registry);
/// The fusions for plans of `placement`: activations, Linear layers, attention and the QDQ
/// convolution rewrite (not on naive, the oracle, which runs a QDQ model as written) in inference plans only
/// (their fused nodes have no backward), attention where the backend `placement` assigns
/// to the fused node has a FusedAttention kernel, nothing across nodes it places on
/// different backends (FuseOptions::apart).
FuseOptions fuse_options_for(const Placement& placement, const KernelRegistry& registry, bool training);
/// The same for one graph fused for several placements (bench's configurations): each
/// fusion only where every one of them allows it.
FuseOptions fuse_options_for(const std::vector<Placement>& placements, const KernelRegistry& registry,
                             bool training);
/// FuseOptions::apart for one placement or several (one graph fused for all of them): apart
/// where any of them runs the two nodes on different backends.
std::function<bool(const Node&, const Node&)> apart_in(std::vector<Placement> placements);

/// Conv -> BatchNormalization (inference statistics, every parameter an initializer, the Conv's
/// output read by the BatchNormalization alone) folded into the convolution's weights and bias,
/// in any graph, prepared or as loaded: what `mosaic quantize` does before it quantises (as
/// ONNX Runtime's quantisation preprocessing does), so that the codes are the folded weights'
/// and no float BatchNormalization sits between two integer convolutions. Returns how many.
int fold_batch_norms(Graph& graph);

/// Rewrites a prepared graph (value_descs filled) in place.
FuseReport fuse_graph(Graph& graph, const FuseOptions& options = {});
/// The LayerNorm recognition alone (core/fuse_layer_norm.cpp); fuse_graph calls it.
void fuse_layer_norms(Graph& graph, FuseReport& report);
/// The RMSNorm recognition alone (core/fuse_layer_norm.cpp), for the fused nodes `accept`
/// takes; fuse_graph calls it with FuseOptions::rms_norm.
void fuse_rms_norms(Graph& graph, const std::function<bool(const Node&)>& accept, FuseReport& report);
/// The SiLU recognition alone (core/fuse_gelu.cpp), for the Swish nodes `accept` takes;
/// fuse_graph calls it with FuseOptions::swish.
void fuse_swishes(Graph& graph, const std::function<bool(const Node&)>& accept, FuseReport& report);
/// The dynamic-quantisation rewrite alone (core/fuse_dynamic.cpp), for the
/// MatMulIntegerToFloat nodes `accept` takes; fuse_graph calls it with FuseOptions::integer.
void fuse_dynamic_products(Graph& graph, const std::function<bool(const Graph&, const Node&)>& accept,
                           FuseReport& report);
/// The Relu -> MaxPool reordering alone (core/fuse_relu_pool.cpp); fuse_graph calls it with
/// FuseOptions::pool_before_relu, keeping apart the pairs `apart` names.
void reorder_relu_max_pools(Graph& graph, const std::function<bool(const Node&, const Node&)>& apart,
                            FuseReport& report);
/// The GELU recognition alone (core/fuse_gelu.cpp); fuse_graph calls it.
void fuse_gelus(Graph& graph, FuseReport& report);
/// The [.., Tq, Tk] values of the attention chains fuse_attention recognises (the scores,
/// scaled, masked, and the probabilities): what the plans count as attention-score memory.
std::set<std::string> attention_scores(const Graph& graph);
/// The Linear-layer recognition alone (core/fuse_linear.cpp), for the Gemm nodes `accept`
/// takes; fuse_graph calls it with FuseOptions::linear.
void fuse_linears(Graph& graph, const std::function<bool(const Node&)>& accept, FuseReport& report);
/// The attention recognition alone (core/fuse_attention.cpp); fuse_graph calls it.
void fuse_attention(Graph& graph, const std::function<bool(const Node&)>& accept, FuseReport& report);
/// The QDQ convolution rewrite alone (core/fuse_qdq.cpp); fuse_graph calls it with FuseOptions::integer.
void fuse_qdq_convs(Graph& graph, const std::function<bool(const Graph&, const Node&)>& accept, FuseReport& report);
/// A QDQ model's float stretches between integer ops (DequantizeLinear -> Relu/Clip/LeakyRelu,
/// Pad, MaxPool, Reshape, Flatten -> QuantizeLinear) as one CodeLookup and the moving steps on
/// 8-bit codes, exactly (core/fuse_qdq_codes.cpp), where `accept` takes every new node; the
/// tables folded by `oracle`'s naive backend.
void fuse_qdq_codes(Graph& graph, const std::function<bool(const Graph&, const Node&)>& accept,
                    const KernelRegistry* oracle, FuseReport& report);

}  // namespace mosaic
