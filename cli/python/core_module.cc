// headroom._core: the C++ side of the Python package (cli/python/headroom/).
// Deliberately thin: strings in, strings out. Settings arrive as RunSettings
// JSON text and flags by name, the answers leave as the JSON text `headroom fit
// --json` and `headroom plan --json` print, built by the same functions
// (cli/answers.h), so the Python values equal the command line's. Refusals come
// back as values (exit status, by cli/exit_status.h as the command line's, and
// message); headroom/_api.py raises them as Python exceptions. The planner runs
// without the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/answers.h"
#include "cli/exit_status.h"
#include "cli/mmengine_loader.h"
#include "cli/plan_exports.h"
#include "planner/predict/measurement.h"

namespace nb = nanobind;

namespace headroom::cli {
namespace {

// (ok, exit status, the JSON document or the refusal's message, notes).
using Reply = std::tuple<bool, int, std::string, std::vector<std::string>>;
using FlagList = std::vector<std::pair<std::string, std::string>>;

// The request as the command line would hold it; a bad flag name is a usage refusal.
Reply build_flags(const std::string& settings_text, const std::string& settings_file,
                  const FlagList& given, SettingsFlags& flags) {
  forget_mmengine_configs();  // each call runs an MMEngine config once, as one command does
  flags.settings_text = settings_text;
  flags.settings_origin =
      "the settings dict";  // messages: "the settings dict: settings.micro_bach: ..."
  flags.settings_file = settings_file;
  for (const auto& [name, value] : given) {
    if (Status status = give_flag(flags, name, value); !status.is_ok()) {
      return {false, exit_status(status), status.message(), {}};
    }
  }
  return {true, kExitOk, "", {}};
}

template <typename T>
Reply reply(const Answered<T>& answered, std::string document) {
  if (!answered.is_ok())
    return {false, exit_status(answered.status), answered.status.message(), answered.notes};
  return {true, kExitOk, std::move(document), answered.notes};
}

Reply fit(const std::string& model, const std::string& settings_text,
          const std::string& settings_file, const FlagList& given) {
  SettingsFlags flags;
  if (Reply bad = build_flags(settings_text, settings_file, given, flags); !std::get<0>(bad))
    return bad;
  nb::gil_scoped_release unlocked;
  const Answered<FitOutcome> answered = answer_fit(model, flags);
  return reply(answered, answered.is_ok() ? fit_document(*answered.value).dump(2) : "");
}

// `emit`: plan --emit's KIND[=FILE] requests (cli/plan_exports.h), built
// before anything is written, into the document's "exports" and "notes".
Reply plan(const std::string& model, const std::string& settings_text,
           const std::string& settings_file, const FlagList& given, const std::vector<std::string>& emit) {
  SettingsFlags flags;
  if (Reply bad = build_flags(settings_text, settings_file, given, flags); !std::get<0>(bad))
    return bad;
  // No export may replace a file the run is read from (cli/output_guard.h).
  if (Status outputs = refuse_outputs_over_inputs(export_files(emit), settings_input_files(model, flags));
      !outputs.is_ok()) {
    return {false, exit_status(outputs), outputs.message(), {}};
  }
  nb::gil_scoped_release unlocked;
  const Answered<PlanOutcome> answered = answer_plan(model, flags);
  if (!answered.is_ok() || emit.empty()) {
    return reply(answered, answered.is_ok() ? plan_document(*answered.value, "").dump(2) : "");
  }
  const auto refuse = [&](const Status& status) -> Reply {
    return {false, exit_status(status), status.message(), answered.notes};
  };
  if (!answered->result.found) {
    return refuse(Status::unsupported("--emit: nothing to export, no plan fits the budgets"));
  }
  // Nor a file those configs named (a `deepspeed:` key's), known once they are read.
  if (Status outputs = refuse_outputs_over_inputs(export_files(emit), answered.files_read); !outputs.is_ok()) {
    return refuse(outputs);
  }
  nlohmann::json document = plan_document(*answered.value, "");
  Result<PlanExports> exports = build_exports(emit, flags, answered->result.best);
  if (!exports.is_ok()) return refuse(exports.status());
  if (Status written = write_export_files(exports.value()); !written.is_ok()) return refuse(written);
  add_exports_to_document(exports.value(), document);
  return {true, kExitOk, document.dump(2), answered.notes};
}

// Reads a measurement file as `headroom report --measurement` does; returns it
// as the reader understood it (JSON text), or the reader's message.
Reply read_measurement(const std::string& path) {
  Result<planner::MeasuredRun> run = planner::load_measured_run(path);
  if (!run.is_ok()) {
    const Status status = run.status().with_prefix("--measurement: ");
    return {false, exit_status(status), status.message(), {}};
  }
  return {true, kExitOk, planner::measured_run_to_json(run.value()).dump(2), {}};
}

}  // namespace
}  // namespace headroom::cli

NB_MODULE(_core, m) {
  m.doc() = "headroom's planner (C++), the same code path as `headroom fit/plan --json`";
  m.attr("__version__") = HEADROOM_VERSION;
  m.def("fit", &headroom::cli::fit, nb::arg("model"), nb::arg("settings_text"),
        nb::arg("settings_file"), nb::arg("flags"),
        "headroom fit --json: (ok, exit_status, document or message, notes)");
  m.def("plan", &headroom::cli::plan, nb::arg("model"), nb::arg("settings_text"),
        nb::arg("settings_file"), nb::arg("flags"), nb::arg("emit"),
        "headroom plan --json [--emit ...]: (ok, exit_status, document or message, notes)");
  m.def("read_measurement", &headroom::cli::read_measurement, nb::arg("path"),
        "a measurement file read as headroom report --measurement reads it");
}
