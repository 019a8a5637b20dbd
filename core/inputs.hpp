// What values a model's integer inputs may take: token ids feed an embedding's Gather, so
// random inputs must stay below its vocabulary. Used by every command that makes up inputs
// (bench, verify --per-node, gradcheck, train's synthetic tokens).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "ir/graph.hpp"

namespace mosaic {

/// The exclusive upper bound valid values of the integer value `name` must stay below: the
/// smallest axis length of every Gather that indexes with it (through Reshape, Unsqueeze,
/// Squeeze, Flatten, Identity and Cast). `why` names the Gather and its data ("the 97 rows
/// of '/tok/Gather''s 'tok.weight'"). 0 when no Gather uses it.
int64_t index_bound(const Graph& g, const std::string& name, std::string* why = nullptr);

/// Why random values cannot stand in for integer graph input `name`: the first node input
/// (through the same pass-throughs) that reads it as a shape, axes, count or position
/// (OpSchema::shape_inputs): "input 1 of node 'r' (Reshape) reads it as a shape, axes or
/// position". "" when none does.
std::string unguessable_reader(const Graph& g, const std::string& name);

/// The recurrent node (RNN, GRU, LSTM) whose input `slot` the graph input `name` is read by
/// directly, or nullptr.
const Node* recurrent_reader(const Graph& g, const std::string& name, size_t* slot);

/// The axis of graph input `name` that --batch binds: 1 for a time-major recurrent input (X,
/// initial_h, initial_c of an RNN, GRU or LSTM with layout 0, [seq, batch, ...]), else 0.
size_t batch_axis(const Graph& g, const std::string& name);

/// The longest sequence of the recurrent node whose sequence_lens (input 4) is `name`: its
/// X's sequence axis, once shapes are bound (0 otherwise). Valid lengths lie in [1, this].
int64_t sequence_length_bound(const Graph& g, const std::string& name, std::string* why = nullptr);

/// Fills an integer tensor of any width with ids uniform in [0, bound) (bound >= 1), each
/// written in the tensor's own type (wrapped where the type is narrower than the bound).
void fill_ids(Tensor& t, int64_t bound, std::mt19937_64& rng);

}  // namespace mosaic
