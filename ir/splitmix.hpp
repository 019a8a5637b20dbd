// splitmix64's finaliser: a 64-bit mix whose outputs for consecutive inputs look independent.
// Counter-based random numbers (the zoo's weights, drawn in parallel) and cheap content hashes
// (the shared GEMV panels' check) use it.
#pragma once

#include <cstdint>

namespace mosaic {

inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace mosaic
