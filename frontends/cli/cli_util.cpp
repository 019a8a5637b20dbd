#include "frontends/cli/cli_util.hpp"

#include <iostream>
#include <string>

namespace mosaic::cli {

int fail(const Status& st) {
  std::cerr << "mosaic: error: " << st.message() << "\n";
  return 2;
}

int fail_with_flags(const Status& st, std::initializer_list<const char*> options) {
  for (const char* option : options)
    if (st.message().rfind(std::string(option) + " ", 0) == 0) return fail(Status(st.code(), "--" + st.message()));
  return fail(st);
}

}  // namespace mosaic::cli
