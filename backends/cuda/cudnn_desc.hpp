// cuDNN descriptors as owned values (destroyed with the kernel that holds them), and the
// shapes cuDNN takes: at least 4 dimensions, int-sized, packed NCHW strides.
#pragma once

#include <cudnn.h>

#include <climits>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "ir/status.hpp"
#include "ir/tensor.hpp"
#include "operators/params.hpp"

namespace mosaic::cuda_backend {

/// One cuDNN descriptor type with its create and destroy functions.
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (d_) Destroy(d_);
  }
  /// Creates it on first use; the error is cuDNN's.
  cudnnStatus_t create() { return d_ ? CUDNN_STATUS_SUCCESS : Create(&d_); }
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using LrnDesc = Descriptor<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;

/// `shape` as cuDNN's int dimensions, padded with trailing 1s to `min_rank` (cuDNN takes 4 or
/// 5 dimensions: a 1-d convolution is a 2-d one over a height of 1). An error naming `label`
/// where the tensor has more elements than an int counts (cuDNN's strides are ints), an empty
/// dimension or more than 8 dimensions.
inline Expected<std::vector<int>> cudnn_dims(const Shape& shape, size_t min_rank, const std::string& label) {
  if (shape.size() > 8) return Status::unsupported(label + ": cuDNN takes at most 8 dimensions");
  std::vector<int> dims;
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 1 || d > INT_MAX || numel > INT_MAX / d)
      return Status::unsupported(label + ": shape " + shape_str(shape) + " is outside cuDNN's int range");
    numel *= d;
    dims.push_back(static_cast<int>(d));
  }
  while (dims.size() < min_rank) dims.push_back(1);
  return dims;
}

/// A sliding window (Conv, pooling) as cuDNN takes it: tensors of `rank` dimensions (4 for a
/// 1-d window, made 2-d over a height of 1), and per spatial axis the window, the pad (both
/// ends alike), the stride and the dilation as ints.
struct CudnnWindow {
  size_t rank = 4;
  std::vector<int> kernel, pads, strides, dilations;
};
/// `w` for cuDNN, or unsupported naming `label`: other than 1-3 spatial axes ("the cuda backend
/// `verb` 1-3 spatial axes"), pads that differ between an axis's ends, sizes beyond an int.
inline Expected<CudnnWindow> cudnn_window(const Window& w, const std::string& label, const char* verb) {
  if (w.rank() < 1 || w.rank() > 3)
    return Status::unsupported(label + ": the cuda backend " + verb + " 1-3 spatial axes");
  CudnnWindow c;
  for (size_t a = 0; a < w.rank(); ++a) {
    if (w.pad_begin[a] != w.pad_end[a])
      return Status::unsupported(label + ": cuDNN pads both ends of an axis alike; this node's pads differ");
    if (w.kernel[a] > INT_MAX || w.pad_begin[a] > INT_MAX || w.stride[a] > INT_MAX || w.dilation[a] > INT_MAX)
      return Status::unsupported(label + ": a window beyond cuDNN's int range");
    c.kernel.push_back(static_cast<int>(w.kernel[a]));
    c.pads.push_back(static_cast<int>(w.pad_begin[a]));
    c.strides.push_back(static_cast<int>(w.stride[a]));
    c.dilations.push_back(static_cast<int>(w.dilation[a]));
  }
  c.rank = w.rank() == 1 ? 4 : w.rank() + 2;
  while (c.kernel.size() + 2 < c.rank) {
    c.kernel.push_back(1);
    c.pads.push_back(0);
    c.strides.push_back(1);
    c.dilations.push_back(1);
  }
  return c;
}

/// Sets `desc` to a packed tensor of `dims` (row-major: NCHW for 4 dimensions) of `type`.
inline cudnnStatus_t set_packed(TensorDesc& desc, const std::vector<int>& dims,
                                cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  cudnnStatus_t s = desc.create();
  if (s != CUDNN_STATUS_SUCCESS) return s;
  std::vector<int> strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
  return cudnnSetTensorNdDescriptor(desc.get(), type, static_cast<int>(dims.size()), dims.data(),
                                    strides.data());
}

}  // namespace mosaic::cuda_backend
