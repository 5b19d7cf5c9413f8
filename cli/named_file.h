// A file a command reads or writes, with what named it: the flag ("--torchtune",
// "-o", "--emit torchtune", "MODEL") or the key of a config that named it
// ("--axolotl cfg.yml: deepspeed"). cli/output_guard.h compares them.
#pragma once

#include <string>

namespace headroom::cli {

struct NamedFile {
  std::string flag;
  std::string path;
};

}  // namespace headroom::cli
