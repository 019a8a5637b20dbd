# mosaic_add_plugin(<target> <sources>...)
#
# Builds an operator/backend plugin (backends/plugin.hpp) as a shared library that
# `mosaic <command> --plugin lib<target>.so` loads. The sources include
# "backends/plugin.hpp" and end with MOSAIC_PLUGIN(registration_function). The plugin links
# nothing of Mosaic's: the few non-inline Mosaic functions it calls resolve against the
# mosaic executable, which exports its symbols. It needs only the headers under
# MOSAIC_SOURCE_DIR (set it when you build a plugin outside Mosaic's tree:
# -DMOSAIC_SOURCE_DIR=/path/to/mosaic).
function(mosaic_add_plugin target)
  if(NOT MOSAIC_SOURCE_DIR)
    message(FATAL_ERROR "mosaic_add_plugin: set MOSAIC_SOURCE_DIR to Mosaic's source directory")
  endif()
  add_library(${target} MODULE ${ARGN})
  target_include_directories(${target} PRIVATE ${MOSAIC_SOURCE_DIR})
  target_compile_features(${target} PRIVATE cxx_std_17)
  set_target_properties(${target} PROPERTIES PREFIX "lib" SUFFIX ".so" POSITION_INDEPENDENT_CODE ON)
endfunction()
