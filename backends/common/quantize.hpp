// The kernels of ONNX's quantisation operators (operators/quantize.hpp): exact integer
// loops, the reference the int8 backends are checked against. Registered by the naive
// oracle for every element type they take.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_quantize_kernels(BackendRegistration& r);
/// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear for the optimised backends (the
/// QDQ models' activations between float kernels, a dynamic model's inputs to its integer
/// products): the same kernels, their float32 <-> 8-bit case on every thread.
void add_qdq_kernels(BackendRegistration& r);
/// QLinearConv's and QLinearMatMul's requantisation multiplier as ONNX's reference forms it:
/// a_scale * b_scale / y_scale in float32 (the one definition every backend's kernel uses).
double qlinear_multiplier(double a_scale, double b_scale, double y_scale);

}  // namespace mosaic
