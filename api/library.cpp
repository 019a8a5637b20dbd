// What libmosaic.so adds to the archives it is made of (CMakeLists.txt, mosaic_library): a
// C entry point, so that a program or script can ask a libmosaic.so which Mosaic it is
// (dlsym "mosaic_library_version") without C++ name mangling or headers.
#include "api/mosaic.hpp"

extern "C" const char* mosaic_library_version() { return mosaic::api::version(); }
