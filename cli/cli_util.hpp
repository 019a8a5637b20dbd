// The command line's own helpers. The CLI is a shell over the library API (api/): it parses
// flags, calls the API and prints what it returns. Every name of mosaic::api is visible here.
#pragma once

#include <initializer_list>

#include "api/util.hpp"
#include "ir/status.hpp"

namespace mosaic::cli {

using namespace ::mosaic::api;

/// Prints "mosaic: error: MESSAGE" and returns exit code 2 (bad input or usage).
int fail(const Status& st);
/// An API field and its flag: {"ranks"} is --ranks, {"modes", "mode"} is --mode.
struct FieldFlag {
  FieldFlag(const char* f) : field(f), flag(f) {}  // NOLINT: a plain name is the common case
  FieldFlag(const char* f, const char* g) : field(f), flag(g) {}
  const char* field;
  const char* flag;
};
/// fail() for an API error: a message that starts with one of the fields, then a space or a
/// colon ("mode must be ...", "groups: ...", the API's field names) is printed with the flag
/// instead ("--mode must be ...").
int fail_with_flags(const Status& st, std::initializer_list<FieldFlag> options);

}  // namespace mosaic::cli
