// OpenBLAS's kernels for this CPU (blas_core.cpp): re-chosen once, before any BLAS call, when
// OpenBLAS fell back to a pre-AVX2 core on a CPU it does not know.
#pragma once

#include <string>

namespace mosaic::im2col_impl {

/// Once per process: when OPENBLAS_CORETYPE is unset and OpenBLAS took a core older than AVX2
/// on a CPU with AVX-512 (AVX2 and FMA), initialise OpenBLAS again on SkylakeX (Haswell).
void choose_openblas_core();
/// The core OpenBLAS took at load when choose_openblas_core replaced it; empty otherwise.
std::string openblas_core_detected();

}  // namespace mosaic::im2col_impl
