// The entry point of libkvtier-client.so that is not a call to kvtierd: the library's version.

#include "kvtier/c.h"

#ifndef KVTIER_VERSION
#error "KVTIER_VERSION is set by the build"
#endif

extern "C" const char* kvtier_version(void) { return KVTIER_VERSION; }
