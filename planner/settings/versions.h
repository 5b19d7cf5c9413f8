// The library releases a run uses (--versions, a pip freeze file). Where a release
// changes what the stack allocates, the stack's mechanisms follow it
// (settings/stack.cc, docs/stacks.md "Releases"); where the run does not say, the
// band covers the releases the oracle shows to differ (bench/oracle, docs/results/oracle.md).
#pragma once

#include <compare>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace headroom::planner {

// A release as PEP 440 orders its first three numbers: "4.44.2", "4.49" (= 4.49.0),
// "2.8.0+cu128" (the local part dropped), "4.57.0.dev0" (priced as 4.57.0).
struct Release {
  int major = 0;
  int minor = 0;
  int patch = 0;
  auto operator<=>(const Release&) const = default;
};
std::optional<Release> parse_release(std::string_view text);

// Package name -> release text, names normalised as pip does (lower case, "_" and
// "." as "-"). Only the packages in versioned_packages() are held.
using PackageVersions = std::map<std::string, std::string>;

// A package whose release headroom reads, and what the release changes.
struct VersionedPackage {
  std::string_view name;
  std::string_view changes;
};
// The packages, in a fixed order; their names as "a, b, c" for messages and --help.
const VersionedPackage* find_versioned_package(std::string_view name);
std::string versioned_package_names();

// PEP 503's normal form: "Transformers" and "bits_and.bytes" as "transformers", "bits-and-bytes".
std::string normalized_package_name(std::string_view name);

// One "NAME=RELEASE" (or "NAME==RELEASE") entry into `out`, checked as parse_versions does.
Status add_version(std::string_view entry, std::string_view origin, PackageVersions& out);

// `text` without the spaces, tabs and line ends around it.
std::string_view trimmed(std::string_view text);

// "transformers=4.44.2,peft=0.12.0" (also "==") into `out`. An unknown package or a
// release that is not one is an error naming `origin` (none when empty: a flag's
// caller names the flag), the entry and what was expected.
Status parse_versions(std::string_view text, std::string_view origin, PackageVersions& out);

// The release of `package` the run gives, if any.
std::optional<Release> release_of(const PackageVersions& versions, std::string_view package);

// "transformers 4.44.2, peft 0.12.0", for the answer's stack line.
std::string versions_text(const PackageVersions& versions);

}  // namespace headroom::planner
