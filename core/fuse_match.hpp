// Helpers the pattern rewrites share (core/fuse_layer_norm.cpp, core/fuse_gelu.cpp): who
// produces and who uses each value, scalar constants, and swapping a matched set of nodes
// for one fused node.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/fuse.hpp"

namespace mosaic::fuse {

/// An index of a graph at one moment; rebuild it after every rewrite.
class Matcher {
 public:
  explicit Matcher(const Graph& g);
  /// The node that produces `v` if its op is `op`, else nullptr.
  const Node* made_by(const std::string& v, const char* op) const;
  /// `v` has exactly one consumer and is not a graph output.
  bool once(const std::string& v) const;
  int uses(const std::string& v) const;
  /// The only node that reads `v` (nullptr unless `once(v)`) if its op is `op`.
  const Node* sole_consumer(const std::string& v, const char* op) const;
  /// A float32 constant with one element.
  std::optional<double> scalar(const std::string& v) const;
  /// The other operand of a two-input node, given one ("" if `v` is neither).
  static std::string other(const Node& n, const std::string& v);

 private:
  const Graph& g_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, int> uses_;
};

/// The descriptor of value `v` (nullptr if shape inference has none).
const TensorDesc* desc_of(const Graph& g, const std::string& v);
/// `base`, or `base.2`, `base.3`, ...: a name no initializer or value has yet.
std::string fresh_name(const Graph& g, const std::string& base);

/// A new constant initializer named after `base` (fresh_name), with its descriptor; never a
/// parameter. Returns its name.
std::string add_constant(Graph& g, const std::string& base, Tensor t);
/// Removes the constants a refused candidate added with add_constant.
void drop_constants(Graph& g, const std::vector<std::string>& names);

/// Replaces `parts` by `fused`, placed where the last of them was (its inputs are all
/// produced earlier), drops the parts' intermediate values (all outputs but `fused`'s)
/// and records the fused node's name in `report`.
void replace_nodes(Graph& g, const std::vector<const Node*>& parts, Node fused, FuseReport& report);

}  // namespace mosaic::fuse

namespace mosaic {

/// Pad(constant 0) -> MaxPool/AveragePool as the pool's own pads (core/fuse.cpp), where that
/// is exact: MaxPool pads with -inf, so only a non-negative input (a ReLU's) whose every
/// window keeps a real element gives the same maxima; AveragePool counts the zeros with
/// count_include_pad=1, so the pool must have no pads of its own or count them already. Not
/// with ceil_mode (a window that starts in the right padding is dropped, a window over padded
/// zeros is not) or MaxPool's Indices output. Returns false, `pool` untouched, where not.
bool fold_pad_into_pool(const Graph& g, const Node& pad, Node& pool, bool input_non_negative);

}  // namespace mosaic
