// The naive backend: plain loops, no tricks, never optimised. It is the reference
// oracle every other backend is tested against, and it runs constant folding.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

/// The naive backend's registration function (core/registration.hpp): every naive kernel, under
/// the backend name "naive".
Status register_naive(Registrar& registrar);

}  // namespace mosaic
