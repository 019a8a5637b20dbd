// The DFT kernel (operators/signal.hpp): a direct transform in double, the oracle's; no fast
// backend registers it yet.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_signal_kernels(BackendRegistration& r);

}  // namespace mosaic
