// Line edits written as a zero-context unified diff (reports/line_edits.h):
// patch(1) applied to the original gives exactly the edited text, whatever
// mix of replacements and insertions shifts the later hunks.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "reports/line_edits.h"
#include "tests/cli/cli_harness.h"

namespace headroom::reports {
namespace {

using cli_harness::quoted;
using cli_harness::read_text;
using cli_harness::TempDir;
using cli_harness::write_text;

// `original` with `diff` applied by patch(1).
std::string patched(const std::string& original, const std::string& diff) {
  TempDir dir;
  const std::string file = dir.file("f.yaml");
  const std::string patch_file = dir.file("f.patch");
  write_text(file, original);
  write_text(patch_file, diff);
  const std::string command = "patch --quiet " + quoted(file) + " < " + quoted(patch_file);
  REQUIRE(std::system(command.c_str()) == 0);
  return read_text(file);
}

constexpr const char* kText = "a: 1\nb: 2  # kept\nc: 3\nd: 4\n";

}  // namespace

TEST_CASE("line edits: a replacement and an append") {
  LineEdits edits(kText);
  edits.replace(1, "b: 5  # kept");
  edits.insert_before(4, {"e: 6"});
  CHECK(edits.edited() == "a: 1\nb: 5  # kept\nc: 3\nd: 4\ne: 6\n");
  CHECK(edits.unified_diff("f.yaml") ==
        "--- f.yaml\n+++ f.yaml\n"
        "@@ -2,1 +2,1 @@\n-b: 2  # kept\n+b: 5  # kept\n"
        "@@ -4,0 +5,1 @@\n+e: 6\n");
  CHECK(patched(kText, edits.unified_diff("f.yaml")) == edits.edited());
}

TEST_CASE("line edits: insertions shift the hunks after them, at the top, inside and before a replaced line") {
  LineEdits edits(kText);
  edits.insert_before(0, {"# header", "top: 0"});
  edits.insert_before(2, {"b2: x", "b3: y"});
  edits.replace(2, "c: 30");
  edits.insert_before(3, {"c2: z"});
  edits.insert_before(4, {"end: 1"});
  const std::string expected = "# header\ntop: 0\na: 1\nb: 2  # kept\nb2: x\nb3: y\nc: 30\nc2: z\nd: 4\nend: 1\n";
  CHECK(edits.edited() == expected);
  const std::string diff = edits.unified_diff("f.yaml");
  CHECK(diff.find("@@ -0,0 +1,2 @@\n") != std::string::npos);
  CHECK(diff.find("@@ -3,1 +5,3 @@\n-c: 3\n+b2: x\n+b3: y\n+c: 30\n") != std::string::npos);
  CHECK(patched(kText, diff) == expected);
}

TEST_CASE("line edits: a CRLF file keeps its line ends on replaced and inserted lines") {
  // Issue 37 (a hostile-input sample): a config saved on Windows came back with LF on each
  // edited line, and with '\r' inside the values the write-backs compared.
  const std::string crlf = "a: 1\r\nb: 2  # kept\r\nc: 3\r\n";
  LineEdits edits(crlf);
  CHECK(edits.lines()[0] == "a: 1");
  CHECK(edits.lines()[1] == "b: 2  # kept");
  edits.replace(1, "b: 5  # kept");
  edits.insert_before(3, {"d: 4"});
  const std::string expected = "a: 1\r\nb: 5  # kept\r\nc: 3\r\nd: 4\r\n";
  CHECK(edits.edited() == expected);
  CHECK(patched(crlf, edits.unified_diff("f.yaml")) == expected);
}

TEST_CASE("line edits: no edit is an empty diff, and the text is unchanged") {
  LineEdits edits(kText);
  edits.insert_before(1, {});
  CHECK(edits.unified_diff("f.yaml") == "--- f.yaml\n+++ f.yaml\n");
  CHECK(edits.edited() == kText);
}

}  // namespace headroom::reports
