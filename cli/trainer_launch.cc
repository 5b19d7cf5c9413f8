#include "cli/trainer_launch.h"

#include "cli/output_guard.h"
#include "cli/run_request.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <vector>

namespace headroom::cli {

std::string trainer_path() {
  if (const char* from_env = std::getenv("HEADROOM_TRAINER"); from_env != nullptr && *from_env != '\0') {
    return from_env;
  }
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return {};
  return (self.parent_path() / kTrainerName).string();
}

int launch_trainer(const CliOptions& options, Terminal& terminal) {
  if (Status outputs = refuse_outputs_over_inputs(options); !outputs.is_ok()) return fail(terminal, outputs);
  const std::string trainer = trainer_path();
  if (trainer.empty() || access(trainer.c_str(), X_OK) != 0) {
    // Bad input is named as the trainer would name it, in every build; only a
    // request that could run is told there is no trainer.
    if (const RunRequest request = check_run_request(options, terminal, false); request.exit_code != 0) {
      return request.exit_code;
    }
    return fail(terminal,
                Status::unsupported(
                    std::string("this headroom was built without LibTorch (no ") + kTrainerName +
                    (trainer.empty() ? std::string() : " at " + trainer) +
                    "), so it cannot train: run scripts/setup_torch.sh, then scripts/build.sh "
                    "(docs/executor.md), or point HEADROOM_TRAINER at a headroom-train"));
  }
  std::vector<std::string> arguments = options.arguments;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(trainer.c_str()));
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  terminal.out.flush();
  terminal.err.flush();
  std::cout.flush();
  std::cerr.flush();
  execv(trainer.c_str(), argv.data());
  return fail(terminal,
              Status::runtime("cannot start the trainer " + trainer + ": " + std::strerror(errno)));
}

}  // namespace headroom::cli
