#include "frontends/data/npy.hpp"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ir/checked.hpp"

namespace mosaic {
namespace {

// NumPy writes headers of a few hundred bytes; anything past this is not a real header.
constexpr uint32_t kMaxHeader = 1 << 16;

// The value of 'key' in the header's dict literal, up to the next ',' or '}' at depth 0 (a
// shape's tuple kept whole); "" when absent.
std::string dict_value(const std::string& h, const std::string& key) {
  for (const char q : {'\'', '"'}) {
    const std::string quoted = std::string(1, q) + key + std::string(1, q);
    size_t at = h.find(quoted);
    if (at == std::string::npos) continue;
    at = h.find(':', at + quoted.size());
    if (at == std::string::npos) return "";
    size_t end = at + 1;
    int depth = 0;
    for (; end < h.size(); ++end) {
      const char c = h[end];
      if (c == '(') ++depth;
      else if (c == ')') --depth;
      else if ((c == ',' || c == '}') && depth == 0) break;
    }
    std::string v = h.substr(at + 1, end - at - 1);
    const size_t a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t");
    return a == std::string::npos ? "" : v.substr(a, b - a + 1);
  }
  return "";
}

Expected<Shape> parse_shape(const std::string& v, const std::string& what) {
  if (v.size() < 2 || v.front() != '(' || v.back() != ')')
    return Status::invalid(what + ": the header's shape '" + v + "' is not a tuple");
  Shape s;
  const std::string inner = v.substr(1, v.size() - 2);
  size_t i = 0;
  while (i < inner.size()) {
    while (i < inner.size() && (inner[i] == ' ' || inner[i] == ',')) ++i;
    if (i == inner.size()) break;
    size_t j = i;
    while (j < inner.size() && inner[j] >= '0' && inner[j] <= '9') ++j;
    if (j == i || j - i > 18) return Status::invalid(what + ": the header's shape '" + v + "' is not a tuple of sizes");
    s.push_back(std::stoll(inner.substr(i, j - i)));
    i = j;
    while (i < inner.size() && inner[i] == ' ') ++i;
    if (i < inner.size() && inner[i] != ',')
      return Status::invalid(what + ": the header's shape '" + v + "' is not a tuple of sizes");
  }
  return s;
}

}  // namespace

Expected<Tensor> load_npy(const std::string& path) {
  const std::string what = "'" + path + "'";
  // A FIFO or device would block on open or never end: only regular files are read.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::not_found(what + ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) return Status::invalid(what + ": not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::io_error(what + ": cannot open " + std::strerror(errno));
  char magic[8] = {};
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return Status::invalid(what + ": not an .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(magic[6]);
  if (major < 1 || major > 3) return Status::invalid(what + ": .npy format version " + std::to_string(major) + " is unknown");
  unsigned char len[4] = {};
  uint32_t header_len = 0;
  if (major == 1) {
    if (!f.read(reinterpret_cast<char*>(len), 2)) return Status::invalid(what + ": truncated header");
    header_len = len[0] | (uint32_t{len[1]} << 8);
  } else {
    if (!f.read(reinterpret_cast<char*>(len), 4)) return Status::invalid(what + ": truncated header");
    header_len = len[0] | (uint32_t{len[1]} << 8) | (uint32_t{len[2]} << 16) | (uint32_t{len[3]} << 24);
  }
  if (header_len > kMaxHeader)
    return Status::invalid(what + ": a header of " + std::to_string(header_len) + " bytes (NumPy's are a few hundred)");
  std::string h(header_len, '\0');
  if (!f.read(h.data(), header_len)) return Status::invalid(what + ": truncated header");
  const std::string descr = dict_value(h, "descr"), order = dict_value(h, "fortran_order");
  if (descr.empty() || order.empty() || dict_value(h, "shape").empty())
    return Status::invalid(what + ": the header lacks 'descr', 'fortran_order' or 'shape': " + h);
  if (order != "False")
    return Status::invalid(what + ": Fortran order; save a C-ordered array (numpy.ascontiguousarray)");
  MOSAIC_ASSIGN_OR_RETURN(const Shape shape, parse_shape(dict_value(h, "shape"), what));
  const std::string type = descr.size() >= 2 ? descr.substr(1, descr.size() - 2) : "";
  DType dtype = DType::kF32;
  int64_t file_elem = 0;
  if (type == "<f4" || type == "<f8") dtype = DType::kF32, file_elem = type == "<f4" ? 4 : 8;
  else if (type == "<i8" || type == "<i4") dtype = DType::kI64, file_elem = type == "<i8" ? 8 : 4;
  else if (type == "|b1") dtype = DType::kBool, file_elem = 1;
  else
    return Status::invalid(what + ": element type " + descr +
                           " (read: '<f4' float32, '<f8' float64 as float32, '<i8' int64, '<i4' int32 as int64, '|b1' bool)");
  MOSAIC_RETURN_IF_ERROR(check_shape(shape, dtype, what));
  MOSAIC_ASSIGN_OR_RETURN(const int64_t bytes, checked_bytes(shape_numel(shape), file_elem, what));
  const std::streamoff data_at = f.tellg();
  f.seekg(0, std::ios::end);
  const std::streamoff rest = f.tellg() - data_at;
  if (rest != bytes)
    return Status::invalid(what + ": " + descr + " " + shape_str(shape) + " is " + std::to_string(bytes) +
                           " bytes of data, the file has " + std::to_string(rest));
  f.seekg(data_at);
  std::string raw(static_cast<size_t>(bytes), '\0');
  if (bytes && !f.read(raw.data(), bytes)) return Status::io_error(what + ": read failed");
  Tensor t = Tensor::empty({dtype, shape});
  const int64_t n = t.numel();
  if (type == "<f4" || type == "<i8" || type == "|b1") {
    std::memcpy(t.data(), raw.data(), raw.size());
  } else if (type == "<f8") {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, raw.data() + 8 * i, 8);
      t.f32()[i] = static_cast<float>(v);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      t.i64()[i] = v;
    }
  }
  if (dtype == DType::kBool)
    for (int64_t i = 0; i < n; ++i)
      if (static_cast<const uint8_t*>(t.data())[i] > 1)
        return Status::invalid(what + ": bool element " + std::to_string(i) + " is neither 0 nor 1");
  return t;
}

}  // namespace mosaic
