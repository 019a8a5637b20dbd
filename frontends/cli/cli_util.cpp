#include "frontends/cli/cli_util.hpp"

#include <iostream>

namespace mosaic::cli {

int fail(const Status& st) {
  std::cerr << "mosaic: error: " << st.message() << "\n";
  return 2;
}

}  // namespace mosaic::cli
