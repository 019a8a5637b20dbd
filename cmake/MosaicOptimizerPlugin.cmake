# mosaic_add_optimizer_plugin(<target> <sources>...)
#
# Builds a user optimizer as a shared library that `mosaic train|optcheck
# --optimizer-plugin lib<target>.so` loads. The sources include "core/optimizer.hpp"
# and end with MOSAIC_OPTIMIZER_PLUGIN("name", Class). The plugin links nothing of
# Mosaic's; it needs only the headers under MOSAIC_SOURCE_DIR (set it when you build a
# plugin outside Mosaic's tree: -DMOSAIC_SOURCE_DIR=/path/to/mosaic). It is built like an
# operator/backend plugin (MosaicPlugin.cmake); only the interface it exports differs.
include(${CMAKE_CURRENT_LIST_DIR}/MosaicPlugin.cmake)
function(mosaic_add_optimizer_plugin target)
  mosaic_add_plugin(${target} ${ARGN})
endfunction()
