// The command line's own helpers. The CLI is a shell over the library API (api/): it parses
// flags, calls the API and prints what it returns. Every name of mosaic::api is visible here.
#pragma once

#include <string>

#include "api/util.hpp"
#include "ir/status.hpp"

namespace mosaic::cli {

using namespace ::mosaic::api;

/// The library API names its options in backquotes ("`mode` must be inference or training",
/// "`evaluate` false"); on the command line they are flags ("--mode", "--no-eval"). Every
/// `name` in `message` becomes its flag: --name with dashes, or the exceptions' table
/// (cli_util.cpp). Text without backquotes comes back as it is.
std::string with_flags(const std::string& message);
/// Prints "mosaic: error: MESSAGE" (with_flags) and returns exit code 2 (bad input or usage).
int fail(const Status& st);

}  // namespace mosaic::cli
