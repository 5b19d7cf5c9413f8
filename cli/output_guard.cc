#include "cli/output_guard.h"

#include <sys/stat.h>

#include <cstring>
#include <optional>

#include "cli/commands.h"
#include "cli/plan_exports.h"

namespace headroom::cli {
namespace {

struct FileId {
  dev_t device;
  ino_t inode;
};

// The file `path` names, through symbolic links; nullopt when there is none.
std::optional<FileId> file_id(const std::string& path) {
  struct stat info {};
  if (path.empty() || ::stat(path.c_str(), &info) != 0) return std::nullopt;
  return FileId{info.st_dev, info.st_ino};
}

bool is_regular_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace

std::vector<NamedFile> settings_input_files(const std::string& model, const SettingsFlags& flags) {
  std::vector<NamedFile> inputs;
  if (!model.empty()) inputs.push_back({"MODEL", model});
  if (!flags.settings_file.empty()) inputs.push_back({"--settings", flags.settings_file});
  for (const auto& [flag, value] : flags.given) {
    if (flag->value_name != nullptr && std::strcmp(flag->value_name, "FILE") == 0) {
      inputs.push_back({primary_name(*flag), value});
    }
  }
  return inputs;
}

Status refuse_outputs_over_inputs(const std::vector<NamedFile>& outputs, const std::vector<NamedFile>& inputs) {
  for (const NamedFile& output : outputs) {
    if (!is_regular_file(output.path)) continue;
    const std::optional<FileId> written = file_id(output.path);
    for (const NamedFile& input : inputs) {
      const std::optional<FileId> read = file_id(input.path);
      if (!written || !read || read->device != written->device || read->inode != written->inode) continue;
      return Status::invalid_input(output.flag + " " + output.path + ": is the same file as " + input.flag + " " +
                                   input.path + ", which this command reads; expected another file (headroom "
                                   "never writes over its input, write the output beside it)");
    }
  }
  return Status::ok();
}

namespace {

// -o, --emit KIND=FILE, and run's outputs.
std::vector<NamedFile> command_outputs(const CliOptions& options) {
  std::vector<NamedFile> outputs = export_files(options.emit);
  const std::vector<NamedFile> named_outputs = {{"-o", options.output_path},
                                                {"--metrics", options.metrics_path},
                                                {"--measurement-out", options.measurement_out},
                                                {"--write-calibration", options.calibration_out}};
  for (const NamedFile& output : named_outputs) {
    if (!output.path.empty()) outputs.push_back(output);
  }
  return outputs;
}

}  // namespace

Status refuse_outputs_over_inputs(const CliOptions& options) {
  std::vector<NamedFile> inputs = settings_input_files(options.model, options.settings);
  inputs.push_back({"PLAN", options.plan_path});
  inputs.push_back({"--measurement", options.measurement_path});
  inputs.push_back({"--data", options.run.data});
  return refuse_outputs_over_inputs(command_outputs(options), inputs);
}

Status refuse_outputs_over_config_files(const CliOptions& options, const std::vector<NamedFile>& files_read) {
  return refuse_outputs_over_inputs(command_outputs(options), files_read);
}

}  // namespace headroom::cli
