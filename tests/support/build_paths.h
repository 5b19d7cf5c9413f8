// Where the checkout and this build's programs are, for the tests. The paths are
// compiled into one small object (build_paths.cc, tests/CMakeLists.txt) and not into
// each test's command line: a path in a -D flag is part of every object's ccache key,
// so a fresh clone elsewhere recompiled every test object; now they are the same
// compilation in every clone (scripts/build.sh). Each test source sees these through
// the compiler's -include (tests/CMakeLists.txt), so a test writes HEADROOM_SOURCE_DIR
// as a `const char*` expression (not a literal to paste another literal onto).
#pragma once

// Outside namespace headroom: this header is in every test source, some of which
// name a helper function `headroom` at global scope.

namespace headroom_test_paths {

const char* source_dir();       // the checkout (PROJECT_SOURCE_DIR)
const char* headroom_binary();  // the `headroom` CLI of this build
const char* comm_worker();      // tests/comm_worker (LibTorch builds)
const char* trainer();          // `headroom-train` (LibTorch builds)

}  // namespace headroom_test_paths

#define HEADROOM_SOURCE_DIR (::headroom_test_paths::source_dir())
#define HEADROOM_BINARY (::headroom_test_paths::headroom_binary())
#define HEADROOM_COMM_WORKER (::headroom_test_paths::comm_worker())
#define HEADROOM_TRAINER (::headroom_test_paths::trainer())
