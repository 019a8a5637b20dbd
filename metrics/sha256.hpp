// SHA-256 (FIPS 180-4) of a byte stream or a file, as lowercase hex: the model hash that
// provenance records.
#pragma once

#include <cstdint>
#include <string>

#include "ir/status.hpp"

namespace mosaic {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::string hex_digest();  ///< finishes the hash; call once

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const std::string& bytes);
/// The file's hash; an error naming the file when it cannot be read.
Expected<std::string> sha256_file(const std::string& path);

}  // namespace mosaic
