// The zoo's sequence models (frontends/zoo/zoo_sequence.cpp): BERT, GPT-2, ViT, an LSTM classifier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace mosaic::zoo_detail {

struct ZooEntry {
  std::string name, description;
  Graph (*build)(uint64_t seed);
};

std::vector<ZooEntry> sequence_zoo();

}  // namespace mosaic::zoo_detail
