#include "planner/configs/config_import.h"

namespace headroom::planner {

Status config_field_error(std::string_view origin, const std::string& path, const std::string& expected,
                          const nlohmann::json& got) {
  const std::string shown =
      got.is_null() ? "" : ", got " + got.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 80);
  return Status::invalid_input(std::string(origin) + ": " + path + ": expected " + expected +
                               shown);
}

std::string padded_batches_band(std::string_view shortest) {
  return " (the band's bottom), and over batches of lengths drawn from " + std::string(shortest) +
         " to it, whose sizes the allocator's cache grows on (its top; --shortest-sample N narrows it)";
}

void respell_notes(ConfigImport& imported, std::string_view from, std::string_view to) {
  const std::string prefix = std::string(from) + ":";
  for (std::string& note : imported.notes) {
    if (note.rfind(prefix, 0) == 0) note = std::string(to) + ":" + note.substr(prefix.size());
  }
}

}  // namespace headroom::planner
