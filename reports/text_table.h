// A plain-text table for the terminal: a header row, data rows, columns padded
// to their widest cell; the first column is left-aligned, the others right-
// aligned unless set otherwise. No colours, no box drawing: it reads the same
// in a terminal, a log file and a test.
#pragma once

#include <string>
#include <vector>

namespace headroom::reports {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);

  void add_row(std::vector<std::string> cells);  // missing cells print empty
  void set_left_aligned(size_t column);
  // Rendered with `indent` spaces before each line and two spaces between columns.
  std::string render(int indent = 2) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> left_;
};

}  // namespace headroom::reports
