// NumPy's .npy files (format 1.0, 2.0 and 3.0) as tensors: the values a user gives an input
// with `--input NAME=FILE`. Read as hostile: the header's length, shape and type are checked
// and the data must fill the rest of the file exactly.
#pragma once

#include <string>

#include "ir/status.hpp"
#include "ir/tensor.hpp"

namespace mosaic {

/// The array in `path`. Little-endian float32 ('<f4'), int64 ('<i8') and bool ('|b1') are read
/// as they are; float64 ('<f8') becomes float32 (rounded once) and int32 ('<i4') int64
/// (exactly), since NumPy makes those by default. Errors name the file: not an .npy file, a
/// header that is too long or cannot be parsed, Fortran order, another element type, a shape
/// too large (ir/checked.hpp), data shorter or longer than the shape.
Expected<Tensor> load_npy(const std::string& path);

}  // namespace mosaic
