#include "ir/tensor.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>

#include "ir/checked.hpp"
#include "ir/elements.hpp"
#include "ir/device.hpp"
#include "ir/status.hpp"

namespace mosaic {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kInternal: return "internal error";
  }
  return "?";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
    case DType::kU64: return 8;
    case DType::kF32:
    case DType::kI32:
    case DType::kU32: return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
    case DType::kU16: return 2;
    case DType::kBool:
    case DType::kI8:
    case DType::kU8:
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ:
    case DType::kU4:
    case DType::kI4:
    case DType::kF4E2M1:
    case DType::kF8E8M0:
    case DType::kU2:
    case DType::kI2: return 1;
    case DType::kCount: break;
  }
  return 0;
}

int dtype_packed_bits(DType d) {
  if (d == DType::kU4 || d == DType::kI4 || d == DType::kF4E2M1) return 4;
  if (d == DType::kU2 || d == DType::kI2) return 2;
  return 0;
}

int64_t dtype_file_bytes(DType d, int64_t n) {
  const int bits = dtype_packed_bits(d);
  if (bits == 0) return n * static_cast<int64_t>(dtype_size(d));
  const int per_byte = 8 / bits;
  return n / per_byte + (n % per_byte != 0);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF64: return "float64";
    case DType::kI8: return "int8";
    case DType::kI16: return "int16";
    case DType::kI32: return "int32";
    case DType::kU8: return "uint8";
    case DType::kU16: return "uint16";
    case DType::kU32: return "uint32";
    case DType::kU64: return "uint64";
    case DType::kF8E4M3FN: return "float8e4m3fn";
    case DType::kF8E4M3FNUZ: return "float8e4m3fnuz";
    case DType::kF8E5M2: return "float8e5m2";
    case DType::kF8E5M2FNUZ: return "float8e5m2fnuz";
    case DType::kU4: return "uint4";
    case DType::kI4: return "int4";
    case DType::kF4E2M1: return "float4e2m1";
    case DType::kF8E8M0: return "float8e8m0";
    case DType::kU2: return "uint2";
    case DType::kI2: return "int2";
    case DType::kCount: break;
  }
  return "?";
}

bool dtype_is_small_float(DType d) {
  return d == DType::kF8E4M3FN || d == DType::kF8E4M3FNUZ || d == DType::kF8E5M2 || d == DType::kF8E5M2FNUZ ||
         d == DType::kF4E2M1 || d == DType::kF8E8M0;
}
bool dtype_is_float(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64 || dtype_is_small_float(d);
}
bool dtype_is_integer(DType d) { return !dtype_is_float(d) && d != DType::kBool && d != DType::kCount; }
bool dtype_is_signed(DType d) {
  if (d == DType::kF8E8M0) return false;  // exponent only, no sign bit
  return dtype_is_float(d) || d == DType::kI2 || d == DType::kI4 || d == DType::kI8 || d == DType::kI16 ||
         d == DType::kI32 || d == DType::kI64;
}

std::string dtype_set_str(DTypeSet set) {
  std::string out;
  for (unsigned i = 0; i < static_cast<unsigned>(DType::kCount); ++i)
    if (set & (DTypeSet{1} << i)) out += (out.empty() ? "" : ", ") + std::string(dtype_name(static_cast<DType>(i)));
  return out;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (!checked_mul(n, d, &n)) return std::numeric_limits<int64_t>::max();
  return n;
}

size_t TensorDesc::bytes() const {
  if (layout) return layout->bytes();
  const int64_t n = numel();
  int64_t b = 0;
  if (n < 0 || !checked_mul(n, static_cast<int64_t>(dtype_size(dtype)), &b)) return SIZE_MAX;
  return static_cast<size_t>(b);
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << ']';
  return os.str();
}

std::string TensorDesc::str() const {
  return std::string(dtype_name(dtype)) + shape_str(shape) + (layout ? " (" + layout->name() + ")" : "");
}

void MemoryTracker::on_alloc(size_t bytes) {
  int64_t now = current_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t prev = peak_.load();
  while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
  }
}

void MemoryTracker::on_free(size_t bytes) { current_.fetch_sub(static_cast<int64_t>(bytes)); }

OutOfMemory::OutOfMemory(size_t bytes)
    : bytes_(bytes),
      what_(bytes == SIZE_MAX ? std::string("out of memory: could not allocate a tensor whose size overflows")
                              : "out of memory: could not allocate " + human_bytes(static_cast<double>(bytes)) + " (" +
                                    std::to_string(bytes) + " bytes)") {}

Buffer::Buffer(size_t bytes, MemoryTracker* tracker) : bytes_(bytes), tracker_(tracker) {
  if (bytes > static_cast<size_t>(kMaxTensorBytes)) throw OutOfMemory(bytes);
  size_t rounded = ((bytes + 63) / 64) * 64;
  if (rounded == 0) rounded = 64;
  data_ = std::aligned_alloc(64, rounded);
  if (!data_) throw OutOfMemory(bytes);
  std::memset(data_, 0, rounded);
  if (tracker_) tracker_->on_alloc(bytes_);
}

Buffer::Buffer(void* data, size_t bytes, std::shared_ptr<void> owner, MemoryTracker* tracker)
    : data_(data), bytes_(bytes), tracker_(tracker), owner_(std::move(owner)) {
  if (tracker_) tracker_->on_alloc(bytes_);
}

Buffer::Buffer(std::shared_ptr<Device> device, void* data, size_t bytes, MemoryTracker* tracker)
    : data_(data), bytes_(bytes), tracker_(tracker), device_(std::move(device)) {
  if (tracker_) tracker_->on_alloc(bytes_);
}

Buffer::~Buffer() {
  if (device_) device_->release(data_);
  else if (!owner_) std::free(data_);
  if (tracker_) tracker_->on_free(bytes_);
}

Tensor Tensor::empty(const TensorDesc& desc, MemoryTracker* tracker) {
  Tensor t;
  t.desc_ = desc;
  t.buffer_ = std::make_shared<Buffer>(desc.bytes(), tracker);
  return t;
}

Tensor Tensor::on_buffer(const TensorDesc& desc, std::shared_ptr<Buffer> buffer) {
  Tensor t;
  t.desc_ = desc;
  t.buffer_ = std::move(buffer);
  return t;
}

Tensor Tensor::scalar_i64(int64_t v) { return from_i64({}, {v}); }

Tensor Tensor::from_f32(const Shape& shape, const std::vector<float>& values) {
  Tensor t = empty({DType::kF32, shape});
  // An empty vector's data() may be null, and memcpy's source must never be (even for 0 bytes).
  if (!values.empty()) std::memcpy(t.data(), values.data(), std::min(values.size() * 4, t.bytes()));
  return t;
}

Tensor Tensor::from_i64(const Shape& shape, const std::vector<int64_t>& values) {
  Tensor t = empty({DType::kI64, shape});
  if (!values.empty()) std::memcpy(t.data(), values.data(), std::min(values.size() * 8, t.bytes()));
  return t;
}

Tensor Tensor::reshaped(const Shape& shape) const {
  Tensor t = *this;
  t.desc_.shape = shape;
  return t;
}

Tensor Tensor::clone(MemoryTracker* tracker) const {
  Tensor t = empty(desc_, tracker);
  if (!bytes()) return t;
  if (Device* d = device()) {
    const Status copied = d->copy_to_host(t.data(), data(), bytes());
    if (!copied.is_ok()) throw std::runtime_error("copying a tensor out of " + d->name() + ": " + copied.message());
  } else {
    std::memcpy(t.data(), data(), bytes());
  }
  return t;
}

double Tensor::get(int64_t i) const { return load_f64(desc_.dtype, data(), i); }

int64_t Tensor::get_i64(int64_t i) const { return load_i64(desc_.dtype, data(), i); }

int64_t saturate_to_i64(double v) {
  // 2^63 is exactly representable; every double below it (and at or above -2^63) converts.
  constexpr double kTwo63 = 9223372036854775808.0;
  if (std::isnan(v)) return 0;
  if (v >= kTwo63) return std::numeric_limits<int64_t>::max();
  if (v < -kTwo63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

std::vector<int64_t> Tensor::to_i64_vector() const {
  // int64 values are copied as they are: through a double, INT64_MAX (an exporter's "to the
  // end" in Slice) would round to 2^63 and wrap to INT64_MIN.
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[static_cast<size_t>(i)] = get_i64(i);
  return v;
}

}  // namespace mosaic
