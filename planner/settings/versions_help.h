// The --versions flag's help, made from the table of versioned packages
// (versions.cc), so a package added there is named in --help without an edit here.
#pragma once

#include <string>

namespace headroom::planner {

// "the library releases ...: transformers (what it changes), torch (...), ..., e.g. ...".
std::string versions_flag_help();

}  // namespace headroom::planner
