// Relu -> MaxPool reordered as MaxPool -> Relu in training plans (core/fuse.hpp,
// FuseOptions::pool_before_relu). The two commute exactly, forward and backward:
// - forward: max over a window of max(x, 0) is max(max over the window of x, 0) (the
//   window always holds a real element; implicit padding is -inf);
// - backward: the pool routes its gradient to the window's arg-max, and Relu's derivative
//   (1 where its output is > 0, 0 elsewhere, at 0 included: operators/eltwise.hpp) is the
//   same at that element in both orders. Where the window's maximum is positive both orders
//   pick the same element among the same values; where it is <= 0 both give it 0, whichever
//   element a tie of zeros picks.
// The Relu then runs on the pooled tensor (a quarter of the elements for a 2x2 pool): in a
// training step Relu's forward and backward are memory passes over the convolution's
// output, as large as any tensor of the network, and that is what the rewrite saves.
//
// Relu -> Pad(constant 0) -> MaxPool (the zoo's CIFAR networks pad before their pools)
// becomes MaxPool with the Pad's pads as its own -> Relu, where fold_pad_into_pool folds them
// (every window keeps a real element; no ceil_mode): a window over padded zeros has the
// maximum max(0, max x) = relu(max x) either way, and its gradient reaches x only where that
// maximum is positive, at the same element. The Pad's copy of the full maps goes with it.
#include "core/fuse.hpp"

#include <memory>

#include "core/fuse_match.hpp"

namespace mosaic {

void reorder_relu_max_pools(Graph& g, const std::function<bool(const Node&, const Node&)>& apart,
                            FuseReport& report) {
  auto matcher = std::make_unique<fuse::Matcher>(g);
  // One pass: a reordered pair is never a candidate again (the Relu now follows the pool),
  // and reordering one pair changes only values and nodes of that pair (a Relu -> Relu ->
  // MaxPool chain gets its second Relu moved, not its first). A folded Pad's node goes, which
  // moves the nodes after it: the index is rebuilt then.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const fuse::Matcher& M = *matcher;
    const Node& relu = g.nodes[i];
    if (relu.op_key() != "Relu" || relu.inputs.size() != 1 || relu.outputs.size() != 1) continue;
    const std::string x = relu.inputs[0], r = relu.outputs[0];
    // A zero Pad between them folds into the pool's pads.
    const Node* pad = M.sole_consumer(r, "Pad");
    if (pad && (pad->inputs.empty() || pad->inputs[0] != r || pad->outputs.size() != 1)) continue;
    const std::string pool_in = pad ? pad->outputs[0] : r;
    const Node* pool = M.sole_consumer(pool_in, "MaxPool");
    if (!pool || pool->inputs.size() != 1 || pool->inputs[0] != pool_in || pool->has_output(1)) continue;
    // Where the placement runs them on different backends (`Relu=naive`), each keeps the
    // tensor it was placed for.
    if (apart && (apart(relu, *pool) || apart(*pool, relu) || (pad && (apart(relu, *pad) || apart(*pad, *pool)))))
      continue;
    Node new_pool = *pool, new_relu = relu;
    if (pad && !fold_pad_into_pool(g, *pad, new_pool, true)) continue;
    const TensorDesc* xd = fuse::desc_of(g, x);
    const TensorDesc* pd = fuse::desc_of(g, pool->outputs[0]);
    if (!xd || !pd || !dtype_is_float(xd->dtype)) continue;
    const auto j = static_cast<size_t>(pool - g.nodes.data());
    const size_t k = pad ? static_cast<size_t>(pad - g.nodes.data()) : i;
    if (j <= i || (pad && (k <= i || k >= j))) continue;  // not in topological order: leave it
    const std::string p = pool->outputs[0];
    const std::string pooled = fuse::fresh_name(g, p + ".before_" + relu.name);
    new_pool.inputs[0] = x;
    new_pool.outputs.assign(1, pooled);
    new_relu.inputs[0] = pooled;
    new_relu.outputs[0] = p;
    // The pool takes the Relu's place (x is ready there) and the Relu the pool's (whatever
    // reads p comes after it).
    report.reordered.push_back(pool->name + " before " + relu.name + (pad ? " (" + pad->name + " as its pads)" : ""));
    g.value_descs[pooled] = *pd;
    g.value_descs.erase(r);
    if (pad) {
      new_pool.name = pad->name + "+" + pool->name;
      g.value_descs.erase(pool_in);
    }
    g.nodes[i] = std::move(new_pool);
    g.nodes[j] = std::move(new_relu);
    if (pad) {
      g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(k));  // i < k: the nodes up to i keep their places
      matcher = std::make_unique<fuse::Matcher>(g);
    }
  }
}

}  // namespace mosaic
