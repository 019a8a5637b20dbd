// Tensor = descriptor (dtype, shape) + a reference-counted buffer from a tracked allocator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace mosaic {

class Device;

/// Element types: ONNX's numeric types. float32 is the compute type of every backend; int64
/// carries shapes and indices; bool comes from comparisons. The others are storage types
/// that only some kernels take (KernelTraits::dtypes): the naive oracle computes float16 and
/// bfloat16 in float32 and the narrow integers in int64, rounding and wrapping each result
/// as ONNX does (core/promote.hpp); float64 and uint64 in their own width where an op
/// implements them. The first three keep their values (stores and messages carry them).
enum class DType : uint8_t {
  kF32, kI64, kBool, kF16, kBF16, kF64, kI8, kI16, kI32, kU8, kU16, kU32, kU64,
  kF8E4M3FN, kF8E4M3FNUZ, kF8E5M2, kF8E5M2FNUZ,  ///< the 8-bit floats (ONNX 1.14's), widened like float16
  /// ONNX's sub-byte types and the scale type of the microscaling formats. Files pack the
  /// 4- and 2-bit ones two or four to a byte; in memory each element has a byte of its own
  /// (int4/int2 sign-extended, the others in the low bits), so that every kernel indexes
  /// them as bytes. onnx_io packs and unpacks them at the file's edge (dtype_packed_bits).
  kU4, kI4, kF4E2M1, kF8E8M0, kU2, kI2,
  kCount
};

/// Bytes per element in memory (1 for the sub-byte types, which are unpacked there).
size_t dtype_size(DType dtype);
/// Bits per element in a file: 4 for int4, uint4 and float4e2m1, 2 for int2 and uint2, 0 for
/// every other type (stored whole bytes, as in memory).
int dtype_packed_bits(DType dtype);
/// Bytes n elements take in a file: ceil(n * bits / 8) for the packed types.
int64_t dtype_file_bytes(DType dtype, int64_t n);
/// ONNX's spelling in lower case: "float32", "float16", "bfloat16", "int8", "uint64", ...
const char* dtype_name(DType dtype);
bool dtype_is_float(DType dtype);    ///< float4e2m1, the float8 kinds, float16, bfloat16, float32, float64
bool dtype_is_small_float(DType dtype);  ///< the float8 kinds, float4e2m1 and float8e8m0: widened to float32 like float16
bool dtype_is_integer(DType dtype);  ///< int2..int64, uint2..uint64 (not bool)
bool dtype_is_signed(DType dtype);   ///< the signed integers and the floats
/// A set of element types, as a bit mask (KernelTraits::dtypes).
using DTypeSet = uint32_t;
constexpr DTypeSet dtype_bit(DType d) { return DTypeSet{1} << static_cast<unsigned>(d); }
constexpr DTypeSet kAllDTypes = (DTypeSet{1} << static_cast<unsigned>(DType::kCount)) - 1;
/// What kernels take unless they say otherwise: float32, int64 and bool.
constexpr DTypeSet kBaseDTypes = dtype_bit(DType::kF32) | dtype_bit(DType::kI64) | dtype_bit(DType::kBool);
/// "float32, int64, bool".
std::string dtype_set_str(DTypeSet set);

using Shape = std::vector<int64_t>;

/// v truncated toward zero, saturated to int64's range (NaN: 0): a float-to-integer conversion
/// with no undefined behaviour for values C++ cannot convert.
int64_t saturate_to_i64(double v);

/// Product of the dimensions (1 for a scalar); INT64_MAX where the product overflows (a shape
/// that was never checked: check_shape in ir/checked.hpp refuses those with a message).
int64_t shape_numel(const Shape& shape);
/// "[64,3,32,32]".
std::string shape_str(const Shape& shape);

/// A backend-specific memory layout (e.g. oneDNN's blocked nChw16c). Tensors whose
/// descriptor has no layout are plain row-major. Only the backend that produced a layout
/// reads it; everyone else gets the tensor through a conversion step the planner inserts.
class Layout {
 public:
  virtual ~Layout() = default;
  virtual std::string backend() const = 0;
  /// Short human-readable name, e.g. "nChw16c".
  virtual std::string name() const = 0;
  /// Storage size in bytes (blocked layouts may pad).
  virtual size_t bytes() const = 0;
  virtual bool equals(const Layout& other) const = 0;
};

struct TensorDesc {
  TensorDesc() = default;
  TensorDesc(DType d, Shape s, std::shared_ptr<const Layout> l = nullptr)
      : dtype(d), shape(std::move(s)), layout(std::move(l)) {}

  DType dtype = DType::kF32;
  Shape shape;
  std::shared_ptr<const Layout> layout;  ///< nullptr: plain row-major

  int64_t numel() const { return shape_numel(shape); }
  /// Storage size; SIZE_MAX for a shape whose size overflows or has a negative (unbound)
  /// dimension, which no allocation accepts.
  size_t bytes() const;
  bool plain() const { return layout == nullptr; }
  bool operator==(const TensorDesc& o) const {
    return dtype == o.dtype && shape == o.shape &&
           (layout == o.layout || (layout && o.layout && layout->equals(*o.layout)));
  }
  bool operator!=(const TensorDesc& o) const { return !(*this == o); }
  std::string str() const;
};

/// Counts live bytes and the high-water mark of everything allocated through it.
class MemoryTracker {
 public:
  void on_alloc(size_t bytes);
  void on_free(size_t bytes);
  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

/// Thrown by Buffer when an allocation fails; says how many bytes were asked for (the CLI
/// prints it as "mosaic: error: out of memory: could not allocate N bytes").
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(size_t bytes);
  const char* what() const noexcept override { return what_.c_str(); }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::string what_;
};

/// A 64-byte aligned, zero-initialised allocation, reported to an optional tracker (more than
/// kMaxTensorBytes throws OutOfMemory: a size that slipped past the checks is never wrapped); or
/// memory someone else allocated (a shared-memory window), kept alive by `owner`.
class Buffer {
 public:
  Buffer(size_t bytes, MemoryTracker* tracker);
  /// Wraps `bytes` at `data`, which `owner` keeps valid; not freed by the Buffer.
  Buffer(void* data, size_t bytes, std::shared_ptr<void> owner, MemoryTracker* tracker);
  /// Takes `bytes` at `data` in `device`'s memory (Device::allocate), released through it.
  Buffer(std::shared_ptr<Device> device, void* data, size_t bytes, MemoryTracker* tracker);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  /// In device memory where device() is set: never read it on the host.
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  /// The device the bytes live on; nullptr: host memory.
  Device* device() const { return device_.get(); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryTracker* tracker_ = nullptr;
  std::shared_ptr<void> owner_;  // set for external memory
  std::shared_ptr<Device> device_;  // set for device memory
};

class Tensor {
 public:
  Tensor() = default;
  /// Allocates a zero-filled tensor.
  static Tensor empty(const TensorDesc& desc, MemoryTracker* tracker = nullptr);
  /// Wraps an existing buffer (which must be large enough).
  static Tensor on_buffer(const TensorDesc& desc, std::shared_ptr<Buffer> buffer);
  static Tensor scalar_i64(int64_t v);
  static Tensor from_f32(const Shape& shape, const std::vector<float>& values);
  static Tensor from_i64(const Shape& shape, const std::vector<int64_t>& values);

  bool defined() const { return buffer_ != nullptr; }
  const TensorDesc& desc() const { return desc_; }
  const Shape& shape() const { return desc_.shape; }
  DType dtype() const { return desc_.dtype; }
  int64_t numel() const { return desc_.numel(); }
  size_t bytes() const { return desc_.bytes(); }
  int64_t dim(size_t i) const { return desc_.shape[i]; }
  size_t rank() const { return desc_.shape.size(); }

  void* data() const { return buffer_ ? buffer_->data() : nullptr; }
  float* f32() const { return static_cast<float*>(data()); }
  int64_t* i64() const { return static_cast<int64_t*>(data()); }
  uint8_t* u8() const { return static_cast<uint8_t*>(data()); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  /// Same buffer, another shape of the same element count.
  Tensor reshaped(const Shape& shape) const;
  /// Deep copy in host memory (untracked unless a tracker is given); a tensor on a device is
  /// copied out of it.
  Tensor clone(MemoryTracker* tracker = nullptr) const;
  /// The device its bytes live on (nullptr: host memory, or no buffer).
  Device* device() const { return buffer_ ? buffer_->device() : nullptr; }
  /// Reads element i as double whatever the dtype (for checks and printing).
  double get(int64_t i) const;
  /// Reads element i of an integer or bool tensor exactly (uint64 above INT64_MAX wraps to
  /// negative); a float element truncated toward zero and saturated (NaN: 0).
  int64_t get_i64(int64_t i) const;
  /// Values as int64, exactly for int64 tensors (never through a double); float values are
  /// truncated toward zero and saturated (NaN: 0). Used for shape inputs.
  std::vector<int64_t> to_i64_vector() const;

 private:
  TensorDesc desc_;
  std::shared_ptr<Buffer> buffer_;
};

}  // namespace mosaic
