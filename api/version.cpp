#include <algorithm>

#include "api/mosaic.hpp"
#include "backends/plugin.hpp"

namespace mosaic::api {

const char* version() { return MOSAIC_VERSION_STRING; }

int plugin_api_version() { return MOSAIC_PLUGIN_API_VERSION; }

Status load_bundled_backends(const std::vector<std::string>& backends) {
  const bool all = std::find(backends.begin(), backends.end(), "all") != backends.end();
  for (const std::string& path : bundled_plugins())
    if (all || std::find(backends.begin(), backends.end(), bundled_backend_name(path)) != backends.end())
      MOSAIC_RETURN_IF_ERROR(load_bundled_plugin(path));
  return Status::ok();
}

}  // namespace mosaic::api
