// YAML configs read with libyaml into JSON (planner/configs/yaml_config.h): PyYAML's
// scalar resolution, and what is refused before a reader sees it.
#include <doctest/doctest.h>

#include <string>

#include "planner/configs/yaml_config.h"

namespace headroom::planner {

TEST_CASE("plain scalars resolve as PyYAML's safe loader does, quoted ones stay strings") {
  Result<nlohmann::json> doc = parse_yaml_config(
      "a: 128_256\nb: 2e-5\nc: 0.3\nd: True\ne: no\nf: 'no'\ng: null\nh: ~\ni: -7\nj: text\nk: [1, x]\nl: .nan\n", "c.yaml",
      "a test");
  REQUIRE_MESSAGE(doc.is_ok(), doc.message());
  const nlohmann::json& j = doc.value();
  CHECK(j["a"] == 128256);
  CHECK(j["b"].get<double>() == doctest::Approx(2e-5));
  CHECK(j["c"].get<double>() == doctest::Approx(0.3));
  CHECK(j["d"] == true);
  CHECK(j["e"] == false);  // YAML 1.1
  CHECK(j["f"] == "no");
  CHECK(j["g"].is_null());
  CHECK(j["h"].is_null());
  CHECK(j["i"] == -7);
  CHECK(j["j"] == "text");
  CHECK(j["k"] == nlohmann::json::array({1, "x"}));
  CHECK(j["l"] == ".nan");  // not a number a reader will take
}

TEST_CASE("overrides set and remove nested keys, values read as YAML") {
  Result<nlohmann::json> doc =
      parse_yaml_config("optimizer:\n  lr: 1\nbatch_size: 4\n", "c.yaml", "a test",
                        {"optimizer.fused=True", "~batch_size", "dataset.packed=true", "tokenizer.max_seq_len=4096"});
  REQUIRE_MESSAGE(doc.is_ok(), doc.message());
  CHECK(doc.value()["optimizer"]["fused"] == true);
  CHECK_FALSE(doc.value().contains("batch_size"));
  CHECK(doc.value()["tokenizer"]["max_seq_len"] == 4096);
}

TEST_CASE("refused before reading: a second document, deep nesting, non-mapping roots, bad overrides") {
  CHECK(parse_yaml_config("a: 1\n---\nb: 2\n", "c.yaml", "x").message().find("a second document") != std::string::npos);
  std::string deep = "a: ";
  for (int i = 0; i < 100; ++i) deep += "[";
  CHECK(parse_yaml_config(deep, "c.yaml", "x").message().find("nesting deeper than 64") != std::string::npos);
  CHECK(parse_yaml_config("- 1\n- 2\n", "c.yaml", "a list").message() ==
        "c.yaml: expected a mapping of keys (a list)");
  CHECK(parse_yaml_config("a: 1\n", "c.yaml", "x", {"=3"}).message().find("expected KEY=VALUE or ~KEY") !=
        std::string::npos);
  CHECK(parse_yaml_config("? [a, b]\n: 1\n", "c.yaml", "x").message().find("a key that is not a plain name") !=
        std::string::npos);
}

}  // namespace headroom::planner
