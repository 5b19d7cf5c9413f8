// Edits of a text file's lines, written as a unified diff without context
// lines (what `patch FILE < PATCH` applies) or as the edited text. The config
// write-backs (reports/recipe_export.h, reports/accelerate_patch.h) change a
// user's file in place, keeping every line they do not name, comments included.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::reports {

class LineEdits {
 public:
  explicit LineEdits(std::string_view text);

  // The file's lines without their ends: a CRLF file's '\r' is kept aside and
  // written back on each line that had it, on a line that replaces one that
  // had it, and on every inserted line when the file's first line had it.
  const std::vector<std::string>& lines() const { return lines_; }
  // Replaces line `index` (0-based) with `text`; a later call for the same line wins.
  void replace(size_t index, std::string text);
  // Inserts `text` before line `index`; `index == lines().size()` appends.
  // Insertions at one place keep the order they were made in.
  void insert_before(size_t index, std::vector<std::string> text);
  bool empty() const { return replaced_.empty() && inserted_.empty(); }

  // Hunks in file order, each "@@ -old +new @@" with its line numbers after
  // the hunks before it, as patch(1) expects them.
  std::string unified_diff(std::string_view path) const;
  // The text with the edits made (lines end in '\n').
  std::string edited() const;

 private:
  std::string end_of(size_t index) const { return carriage_[index] ? "\r" : ""; }
  std::string inserted_end() const { return !carriage_.empty() && carriage_.front() ? "\r" : ""; }

  std::vector<std::string> lines_;
  std::vector<bool> carriage_;  // line i ended in "\r\n"
  std::map<size_t, std::string> replaced_;
  std::map<size_t, std::vector<std::string>> inserted_;
};

}  // namespace headroom::reports
