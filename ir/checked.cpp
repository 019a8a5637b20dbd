#include "ir/checked.hpp"

#include <cmath>
#include <cstdio>

namespace mosaic {

std::string human_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "more than 1024 %s", units[u]);
  else std::snprintf(buf, sizeof buf, "%.3g %s", bytes, units[u]);
  return buf;
}

namespace {
const std::string& limit_text() {
  static const std::string s = "the limit is " + human_bytes(static_cast<double>(kMaxTensorBytes));
  return s;
}
}  // namespace

Status check_shape(const Shape& shape, DType dtype, const std::string& what) {
  // Shapes are printed with at most 8 dims so that a hostile rank does not flood the message.
  auto shape_text = [&] {
    if (shape.size() <= 8) return shape_str(shape);
    std::string s = shape_str(Shape(shape.begin(), shape.begin() + 8));
    s.pop_back();
    return s + ",... (" + std::to_string(shape.size()) + " dims)]";
  };
  if (static_cast<int64_t>(shape.size()) > kMaxRank)
    return Status::invalid(what + ": shape " + shape_text() + " has rank " + std::to_string(shape.size()) +
                           " (at most " + std::to_string(kMaxRank) + ")");
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  double approx = static_cast<double>(bytes);  // the true size, for the message, even past 2^64
  bool over = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0)
      return Status::invalid(what + ": shape " + shape_text() + " has a negative dimension (" + std::to_string(d) + ")");
    if (d > kMaxDim)
      return Status::invalid(what + ": shape " + shape_text() + ": dimension " + std::to_string(i) + " is " +
                             std::to_string(d) + ", above the largest Mosaic accepts (2^31 - 1)");
    approx *= static_cast<double>(d);
    if (!over && !checked_mul(bytes, d, &bytes)) over = true;
  }
  if (approx == 0) return Status::ok();
  if (over || bytes > kMaxTensorBytes)
    return Status::invalid(what + ": shape " + shape_text() + " is too large: " + dtype_name(dtype) + " of " +
                           human_bytes(approx) + " (" + limit_text() + ")");
  return Status::ok();
}

Expected<int64_t> checked_bytes(int64_t count, int64_t element_bytes, const std::string& what) {
  int64_t bytes = 0;
  if (count < 0 || element_bytes < 0) return Status::invalid(what + ": negative size");
  if (!checked_mul(count, element_bytes, &bytes) || bytes > kMaxTensorBytes)
    return Status::invalid(what + ": " +
                           human_bytes(static_cast<double>(count) * static_cast<double>(element_bytes)) +
                           " is too large (" + limit_text() + ")");
  return bytes;
}

}  // namespace mosaic
