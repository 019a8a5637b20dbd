// ONNX's DFT: a discrete Fourier transform along one axis of a real ([..., 1]) or complex
// ([..., 2], real and imaginary parts) signal; forward or inverse (scaled by 1/n), full or
// one-sided (the first n/2 + 1 frequencies of a real signal, and back), at a length that
// truncates or zero-pads the signal; STFT, the DFT of windowed frames; and MelWeightMatrix,
// the triangular filters that map a one-sided spectrum's bins to mel bins. The naive oracle
// computes them directly in double.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

struct DftParams {
  int64_t axis = 1;        ///< in the input's dims (never the last, which holds the parts)
  int64_t length = 0;      ///< n: the transform's length
  int64_t in_len = 0;      ///< the input's extent along axis
  int64_t out_len = 0;     ///< n, or n / 2 + 1 for a one-sided forward transform
  bool inverse = false, onesided = false;
  int64_t in_parts = 1, out_parts = 2;  ///< 1: real, 2: complex
  int64_t outer = 1, inner = 1;         ///< dims before and after axis (the parts excluded)
  Shape out;
};
Expected<DftParams> dft_params(const OpContext& ctx);

/// STFT: the DFT of each frame of frame_length samples, frame_step apart, of signal
/// [batch, length, 1 or 2], each multiplied by the window (ones without one).
struct StftParams {
  int64_t batch = 1, length = 0, parts = 1, step = 1, frame_length = 0, frames = 0, bins = 0;
  bool onesided = true, has_window = false;
  Shape out;
};
Expected<StftParams> stft_params(const OpContext& ctx);

/// MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins] of triangles whose corners are the
/// spectrum bins of num_mel_bins + 2 points evenly spaced on the mel scale (mel(f) = 2595
/// log10(1 + f / 700)) from lower_edge_hertz to upper_edge_hertz, as ONNX's reference spaces
/// them (the span divided by num_mel_bins + 2).
struct MelParams {
  int64_t spectrum_bins = 1, mel_bins = 1;
  std::vector<int64_t> corners;  ///< num_mel_bins + 2 spectrum bins
  DType dtype = DType::kF32;
};
Expected<MelParams> mel_params(const OpContext& ctx);
/// Row `bin`, column `mel` of the matrix.
double mel_weight(const MelParams& p, int64_t bin, int64_t mel);

void add_signal_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
