// The paths tests/support/build_paths.h declares, from this object's -D flags.
#include "tests/support/build_paths.h"

namespace headroom_test_paths {

const char* source_dir() { return HEADROOM_PATH_SOURCE_DIR; }
const char* headroom_binary() { return HEADROOM_PATH_BINARY; }
#ifdef HEADROOM_PATH_COMM_WORKER  // LibTorch builds only: a test of another build that asks fails to link
const char* comm_worker() { return HEADROOM_PATH_COMM_WORKER; }
const char* trainer() { return HEADROOM_PATH_TRAINER; }
#endif

}  // namespace headroom_test_paths
