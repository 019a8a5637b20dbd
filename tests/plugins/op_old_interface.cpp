// An operator plugin that claims another interface version: Mosaic must refuse to load it.
#include "backends/plugin.hpp"

extern "C" int mosaic_plugin_api_version() { return MOSAIC_PLUGIN_API_VERSION + 1000; }
extern "C" uint64_t mosaic_plugin_abi() { return mosaic::plugin_abi_fingerprint(); }
extern "C" void mosaic_plugin_register(mosaic::Registrar* r, mosaic::Status* st) {
  *st = r->add_backend({"old", "never registered", nullptr, nullptr});
}
