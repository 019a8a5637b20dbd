#include "cli/cli_util.hpp"

#include <iostream>
#include <string>

namespace mosaic::cli {

int fail(const Status& st) {
  std::cerr << "mosaic: error: " << st.message() << "\n";
  return 2;
}

int fail_with_flags(const Status& st, std::initializer_list<FieldFlag> options) {
  const std::string& m = st.message();
  for (const FieldFlag& o : options) {
    const size_t n = std::string(o.field).size();
    if (m.rfind(o.field, 0) == 0 && m.size() > n && (m[n] == ' ' || m[n] == ':'))
      return fail(Status(st.code(), "--" + std::string(o.flag) + m.substr(n)));
  }
  return fail(st);
}

}  // namespace mosaic::cli
