// Element access for every DType: float16 and bfloat16 conversions (round to nearest even),
// and reads and writes of one element as double or int64 with ONNX's conversion rules.
// The naive oracle's type promotion (core/promote.cpp), Cast and the frontends use them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ir/tensor.hpp"

namespace mosaic {

/// IEEE binary16 bits to float (exact: every float16 is a float).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf, NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: man * 2^-24
    const float v = static_cast<float>(man) * 5.9604644775390625e-08f;
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// float to IEEE binary16, rounding to nearest even; overflow gives infinity, NaN stays NaN.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal or zero, in units of 2^-24
    float a;
    std::memcpy(&a, &abs, 4);
    const float units = a * 16777216.0f;  // exact: a power-of-two scale
    const float r = std::nearbyint(units);  // the default rounding mode: to nearest even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xfffu + mant_odd;  // to nearest, ties to even, at bit 13
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

inline float bf16_to_f32(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// float to bfloat16, rounding to nearest even; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

/// The 8-bit floats (ONNX's FLOAT8E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ): exponent and mantissa
/// bits, bias; E5M2 has IEEE infinities and NaNs; the FN kinds have no infinity and one NaN
/// pattern per sign (all ones); the FNUZ kinds no infinity, no negative zero, and one NaN,
/// 0x80.
struct Float8Format {
  int exp_bits, man_bits, bias;
  bool ieee, uz;
  uint8_t max_code;  ///< the largest finite positive value's code
};
inline Float8Format float8_format(DType d) {
  switch (d) {
    case DType::kF8E4M3FNUZ: return {4, 3, 8, false, true, 0x7f};
    case DType::kF8E5M2: return {5, 2, 15, true, false, 0x7b};
    case DType::kF8E5M2FNUZ: return {5, 2, 16, false, true, 0x7f};
    default: return {4, 3, 7, false, false, 0x7e};  // kF8E4M3FN
  }
}

inline double float8_to_f64(Float8Format f, uint8_t code) {
  if (f.uz && code == 0x80) return NAN;
  const bool negative = (code & 0x80) != 0;
  const int e = (code >> f.man_bits) & ((1 << f.exp_bits) - 1), m = code & ((1 << f.man_bits) - 1);
  if (f.ieee && e == (1 << f.exp_bits) - 1) return m ? NAN : negative ? -INFINITY : INFINITY;
  if (!f.ieee && !f.uz && (code & 0x7f) == 0x7f) return NAN;
  const double v = e == 0 ? std::ldexp(m, 1 - f.bias - f.man_bits) : std::ldexp(1.0 + std::ldexp(m, -f.man_bits), e - f.bias);
  return negative ? -v : v;
}

/// v rounded to nearest even among the format's values. Beyond the largest finite value
/// (and infinity): that value when saturating, else infinity (E5M2) or NaN (Cast's
/// saturate = 0).
inline uint8_t f64_to_float8(Float8Format f, double v, bool saturate) {
  const uint8_t nan = f.uz ? 0x80 : f.ieee ? 0x7e : 0x7f;
  if (std::isnan(v)) return nan;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  auto with_sign = [&](uint8_t c) -> uint8_t { return f.uz && c == 0 ? 0 : static_cast<uint8_t>(c | sign); };
  auto overflow = [&]() -> uint8_t {
    if (saturate) return with_sign(f.max_code);
    return f.ieee ? static_cast<uint8_t>(sign | 0x7c) : nan;
  };
  const double top = float8_to_f64(f, f.max_code);
  if (a >= top) {
    const double half_ulp = (top - float8_to_f64(f, static_cast<uint8_t>(f.max_code - 1))) / 2;
    if (a == top || a < top + half_ulp || (a == top + half_ulp && (f.max_code & 1) == 0)) return with_sign(f.max_code);
    return overflow();
  }
  // The largest code whose value is at most a (positive codes ascend with their values).
  int lo = 0, hi = f.max_code;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (float8_to_f64(f, static_cast<uint8_t>(mid)) <= a) lo = mid;
    else hi = mid - 1;
  }
  const double below = float8_to_f64(f, static_cast<uint8_t>(lo)), above = float8_to_f64(f, static_cast<uint8_t>(lo + 1));
  int code = lo;
  if (a - below > above - a || (a - below == above - a && (lo & 1))) code = lo + 1;
  return with_sign(static_cast<uint8_t>(code));
}

/// float4e2m1 (1 sign, 2 exponent, 1 mantissa bit; bias 1; no infinity, no NaN): the low
/// four bits of `code`.
inline double float4_to_f64(uint8_t code) {
  static constexpr double kMagnitude[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double v = kMagnitude[code & 7];
  return (code & 8) ? -v : v;
}

/// v rounded to nearest even among float4e2m1's values, saturating to +-6 (infinity too).
/// The format has no NaN: NaN gives the code ONNX's reference gives (0x8 for a NaN whose
/// sign bit is clear, 0x0 for one whose sign bit is set).
inline uint8_t f64_to_float4(double v) {
  if (std::isnan(v)) return std::signbit(v) ? 0 : 8;
  const uint8_t sign = std::signbit(v) ? 8 : 0;
  const double a = std::fabs(v);
  int code = 0;
  while (code < 7 && float4_to_f64(static_cast<uint8_t>(code + 1)) <= a) ++code;
  if (code < 7) {
    const double below = float4_to_f64(static_cast<uint8_t>(code)), above = float4_to_f64(static_cast<uint8_t>(code + 1));
    if (a - below > above - a || (a - below == above - a && (code & 1))) ++code;
  }
  return static_cast<uint8_t>(sign | code);
}

/// float8e8m0 (exponent only, bias 127, 0xff is NaN): 2^(code - 127).
inline double float8e8m0_to_f64(uint8_t code) { return code == 0xff ? NAN : std::ldexp(1.0, code - 127); }

/// How a value between two powers of two becomes a float8e8m0 (Cast's round_mode, opset 24).
enum class E8M0Rounding : uint8_t { kUp, kDown, kNearest };

/// v (as float32: the sign is dropped, as ONNX's reference drops it) to float8e8m0. NaN and
/// infinity give 0xff; rounding past 2^127 saturates to 0xfe when `saturate` is set.
inline uint8_t f64_to_float8e8m0(double v, bool saturate, E8M0Rounding mode) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t e = (bits >> 23) & 0xffu;
  if (e == 0xff) return 0xff;
  bool up = false;
  if (mode == E8M0Rounding::kUp) {
    up = (bits & 0x7fffffu) != 0;
  } else if (mode == E8M0Rounding::kNearest) {
    const bool g = bits & 0x400000u, r = bits & 0x200000u, st = (bits & 0x1fffffu) != 0;
    up = g && (r || st || e > 0);
  }
  if (up && !(saturate && e == 0xfe)) ++e;
  return static_cast<uint8_t>(e);
}

/// Sign-extends the low `bits` bits of v (int4, int2); the low bits alone for unsigned.
inline int64_t wrap_bits(int64_t v, int bits, bool is_signed) {
  const uint64_t mask = (uint64_t{1} << bits) - 1, low = static_cast<uint64_t>(v) & mask;
  if (is_signed && (low >> (bits - 1))) return static_cast<int64_t>(low) - static_cast<int64_t>(mask + 1);
  return static_cast<int64_t>(low);
}

/// double to float rounding to odd (inexact results get their last bit set): a later rounding
/// of it to float16 or bfloat16, both at least two bits narrower, is then the correct
/// rounding of the double, where rounding to nearest twice could be one unit off.
inline float f64_to_f32_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isfinite(f) && static_cast<double>(f) != v && !std::isnan(v)) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if (std::fabs(static_cast<double>(f)) > std::fabs(v)) b -= 1;  // rounded away from zero: step back
    b |= 1u;
    std::memcpy(&f, &b, 4);
  }
  return f;
}

/// Element i of `data` (of type d) as double: exact for every float and for integers up to
/// 2^53 in magnitude.
inline double load_f64(DType d, const void* data, int64_t i) {
  switch (d) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF64: return static_cast<const double*>(data)[i];
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::kI32: return static_cast<const int32_t*>(data)[i];
    case DType::kI16: return static_cast<const int16_t*>(data)[i];
    case DType::kI8: return static_cast<const int8_t*>(data)[i];
    case DType::kU64: return static_cast<double>(static_cast<const uint64_t*>(data)[i]);
    case DType::kU32: return static_cast<const uint32_t*>(data)[i];
    case DType::kU16: return static_cast<const uint16_t*>(data)[i];
    case DType::kU8:
    case DType::kBool: return static_cast<const uint8_t*>(data)[i];
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ: return float8_to_f64(float8_format(d), static_cast<const uint8_t*>(data)[i]);
    case DType::kF4E2M1: return float4_to_f64(static_cast<const uint8_t*>(data)[i]);
    case DType::kF8E8M0: return float8e8m0_to_f64(static_cast<const uint8_t*>(data)[i]);
    case DType::kI4:
    case DType::kI2: return static_cast<const int8_t*>(data)[i];
    case DType::kU4:
    case DType::kU2: return static_cast<const uint8_t*>(data)[i];
    case DType::kCount: break;
  }
  return 0;
}

/// Element i of an integer or bool array as int64, exactly (uint64 reinterpreted: values
/// above INT64_MAX come out negative, the same 64 bits); a float truncated toward zero and
/// saturated (NaN: 0).
inline int64_t load_i64(DType d, const void* data, int64_t i) {
  switch (d) {
    case DType::kI64: return static_cast<const int64_t*>(data)[i];
    case DType::kI32: return static_cast<const int32_t*>(data)[i];
    case DType::kI16: return static_cast<const int16_t*>(data)[i];
    case DType::kI8:
    case DType::kI4:
    case DType::kI2: return static_cast<const int8_t*>(data)[i];
    case DType::kU64: return static_cast<int64_t>(static_cast<const uint64_t*>(data)[i]);
    case DType::kU32: return static_cast<const uint32_t*>(data)[i];
    case DType::kU16: return static_cast<const uint16_t*>(data)[i];
    case DType::kU8:
    case DType::kU4:
    case DType::kU2:
    case DType::kBool: return static_cast<const uint8_t*>(data)[i];
    default: return saturate_to_i64(load_f64(d, data, i));
  }
}

/// Writes v into element i of an integer or bool array: the low bits, as C++ and ONNX's
/// integer arithmetic wrap (bool: v != 0). For a float array, v converted.
inline void store_i64(DType d, void* data, int64_t i, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  switch (d) {
    case DType::kI64: static_cast<int64_t*>(data)[i] = v; return;
    case DType::kU64: static_cast<uint64_t*>(data)[i] = u; return;
    case DType::kI32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(static_cast<uint32_t>(u)); return;
    case DType::kU32: static_cast<uint32_t*>(data)[i] = static_cast<uint32_t>(u); return;
    case DType::kI16: static_cast<int16_t*>(data)[i] = static_cast<int16_t>(static_cast<uint16_t>(u)); return;
    case DType::kU16: static_cast<uint16_t*>(data)[i] = static_cast<uint16_t>(u); return;
    case DType::kI8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(static_cast<uint8_t>(u)); return;
    case DType::kU8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(u); return;
    case DType::kI4: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(wrap_bits(v, 4, true)); return;
    case DType::kU4: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(wrap_bits(v, 4, false)); return;
    case DType::kI2: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(wrap_bits(v, 2, true)); return;
    case DType::kU2: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(wrap_bits(v, 2, false)); return;
    case DType::kF4E2M1: static_cast<uint8_t*>(data)[i] = f64_to_float4(static_cast<double>(v)); return;
    case DType::kF8E8M0:
      static_cast<uint8_t*>(data)[i] = f64_to_float8e8m0(static_cast<double>(v), true, E8M0Rounding::kUp);
      return;
    case DType::kBool: static_cast<uint8_t*>(data)[i] = v != 0; return;
    case DType::kF32: static_cast<float*>(data)[i] = static_cast<float>(v); return;
    case DType::kF64: static_cast<double*>(data)[i] = static_cast<double>(v); return;
    case DType::kF16: static_cast<uint16_t*>(data)[i] = f32_to_f16(static_cast<float>(v)); return;
    case DType::kBF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(static_cast<float>(v)); return;
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ:
      static_cast<uint8_t*>(data)[i] = f64_to_float8(float8_format(d), static_cast<double>(v), true);
      return;
    case DType::kCount: return;
  }
}

/// Writes v into element i of a float array, rounded once to nearest even. For an integer
/// array: v truncated toward zero, saturated to the type's range where it is 64 bits wide
/// and wrapped to the narrower ones (C++ leaves out-of-range conversions undefined; ONNX
/// leaves them unspecified). bool: v != 0 (NaN is true, as numpy has it). The 8-bit floats
/// saturate beyond their range unless `saturate` is false (Cast's attribute).
inline void store_f64(DType d, void* data, int64_t i, double v, bool saturate = true,
                      E8M0Rounding e8m0 = E8M0Rounding::kUp) {
  switch (d) {
    case DType::kF4E2M1: static_cast<uint8_t*>(data)[i] = f64_to_float4(v); return;
    case DType::kF8E8M0: static_cast<uint8_t*>(data)[i] = f64_to_float8e8m0(v, saturate, e8m0); return;
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ:
      static_cast<uint8_t*>(data)[i] = f64_to_float8(float8_format(d), v, saturate);
      return;
    case DType::kF32: static_cast<float*>(data)[i] = static_cast<float>(v); return;
    case DType::kF64: static_cast<double*>(data)[i] = v; return;
    case DType::kF16: static_cast<uint16_t*>(data)[i] = f32_to_f16(f64_to_f32_odd(v)); return;
    case DType::kBF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(f64_to_f32_odd(v)); return;
    case DType::kBool: static_cast<uint8_t*>(data)[i] = v != 0; return;
    case DType::kU64:
      if (v >= 9223372036854775808.0) {  // 2^63 and above: beyond int64, within uint64 up to 2^64
        static_cast<uint64_t*>(data)[i] = v >= 18446744073709551616.0 ? UINT64_MAX : static_cast<uint64_t>(v);
        return;
      }
      [[fallthrough]];
    default: store_i64(d, data, i, saturate_to_i64(v));
  }
}

/// Converts n elements of type `from` to type `to` as ONNX's Cast does: integers to integers
/// by their bits (wrapping), floats to integers truncated (store_f64), integers to floats
/// rounded once, floats to floats rounded once to nearest even.
inline void convert_elements(DType from, const void* x, DType to, void* y, int64_t n, bool saturate = true,
                             E8M0Rounding e8m0 = E8M0Rounding::kUp) {
  if (from == to) {
    std::memcpy(y, x, static_cast<size_t>(n) * dtype_size(from));
    return;
  }
  const bool from_int = !dtype_is_float(from), to_int = !dtype_is_float(to);
  for (int64_t i = 0; i < n; ++i) {
    if (from_int && to_int) {
      store_i64(to, y, i, load_i64(from, x, i));
    } else if (from_int && (from == DType::kU64 || from == DType::kI64) && to == DType::kF32) {
      // one rounding: through a double, values past 2^53 would round twice
      static_cast<float*>(y)[i] = from == DType::kU64 ? static_cast<float>(static_cast<const uint64_t*>(x)[i])
                                                       : static_cast<float>(static_cast<const int64_t*>(x)[i]);
    } else {
      store_f64(to, y, i, load_f64(from, x, i), saturate, e8m0);
    }
  }
}

/// Unpacks n elements of a sub-byte type (dtype_packed_bits > 0) from `packed`, lowest bits
/// first as ONNX stores them, into one byte each (int4/int2 sign-extended).
inline void unpack_elements(DType d, const uint8_t* packed, int64_t n, void* out) {
  const int bits = dtype_packed_bits(d), per_byte = 8 / bits;
  const bool is_signed = d == DType::kI4 || d == DType::kI2;
  auto* y = static_cast<uint8_t*>(out);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t field = (packed[i / per_byte] >> ((i % per_byte) * bits)) & ((1 << bits) - 1);
    y[i] = static_cast<uint8_t>(wrap_bits(field, bits, is_signed));
  }
}

/// The inverse of unpack_elements: dtype_file_bytes(d, n) bytes, unused high bits zero.
inline std::vector<uint8_t> pack_elements(DType d, const void* in, int64_t n) {
  const int bits = dtype_packed_bits(d), per_byte = 8 / bits;
  std::vector<uint8_t> packed(static_cast<size_t>(dtype_file_bytes(d, n)), 0);
  const auto* x = static_cast<const uint8_t*>(in);
  for (int64_t i = 0; i < n; ++i)
    packed[static_cast<size_t>(i / per_byte)] |=
        static_cast<uint8_t>((x[i] & ((1 << bits) - 1)) << ((i % per_byte) * bits));
  return packed;
}

/// An index tensor's values as int64: its own data where it is int64, else widened into
/// `scratch` (int32 indices).
inline const int64_t* indices_i64(const Tensor& t, std::vector<int64_t>& scratch) {
  if (t.dtype() == DType::kI64) return t.i64();
  scratch = t.to_i64_vector();
  return scratch.data();
}

}  // namespace mosaic
