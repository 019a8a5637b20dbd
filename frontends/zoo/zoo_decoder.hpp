// The zoo's decoders with a KV cache in Hugging Face's interface (frontends/zoo/zoo_decoder.cpp):
// a Llama-style decoder (tiny, and TinyLlama-1.1B's shape) and GPT-2 small.
#pragma once

#include <vector>

#include "frontends/zoo/zoo_sequence.hpp"

namespace mosaic::zoo_detail {

std::vector<ZooEntry> decoder_zoo();

}  // namespace mosaic::zoo_detail
