// Sharded precompute: the shard from --shard, Slurm's array variables or Kubernetes' completion
// index (with its count from a flag or RAGKV_SHARD_COUNT), malformed values refused naming their
// source; and three shards of a precompute on one store compute disjoint chunk sets whose union is
// byte for byte what one process computes.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/shard.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ragkv::Shard;
using ragkv::resolve_shard;
constexpr auto q = &ragkv::test::shell_quote;

// An environment of the given variables only.
auto env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> kv_files(const fs::path& store) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(store / "kv"))
    if (e.path().extension() == ".rkv") out[e.path().filename().string()] = ragkv::read_file(e.path());
  return out;
}

}  // namespace

TEST_CASE("shard: from --shard, Slurm's array, Kubernetes' index; errors name their source") {
  const auto none = env_of({});
  Shard s = resolve_shard("", std::nullopt, none);
  CHECK_FALSE(s.sharded());
  CHECK(s.owns(12345));
  s = resolve_shard("1/3", std::nullopt, none);
  CHECK(s.index == 1);
  CHECK(s.count == 3);
  CHECK(s.owns(4));
  CHECK_FALSE(s.owns(5));
  CHECK(s.name() == "1/3");
  // Slurm arrays often start at 1 (--array=1-3): the index is counted from SLURM_ARRAY_TASK_MIN.
  s = resolve_shard("", std::nullopt,
                    env_of({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_COUNT", "3"}}));
  CHECK(s.index == 2);
  CHECK(s.count == 3);
  CHECK(s.source == "SLURM_ARRAY_TASK_ID");
  // --shard wins over the environment.
  CHECK(resolve_shard("0/2", std::nullopt, env_of({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "2"}})).index == 0);
  // Kubernetes: the index from JOB_COMPLETION_INDEX, the count from the flag or RAGKV_SHARD_COUNT.
  CHECK(resolve_shard("", 4, env_of({{"JOB_COMPLETION_INDEX", "3"}})).count == 4);
  CHECK(resolve_shard("", std::nullopt, env_of({{"JOB_COMPLETION_INDEX", "0"}, {"RAGKV_SHARD_COUNT", "2"}})).count == 2);
  CHECK_THROWS_WITH_AS(resolve_shard("", std::nullopt, env_of({{"JOB_COMPLETION_INDEX", "0"}})),
                       doctest::Contains("--shard-count"), ragkv::Error);
  CHECK_THROWS_WITH_AS(resolve_shard("3/3", std::nullopt, none), doctest::Contains("shards are numbered 0 to 2"), ragkv::Error);
  CHECK_THROWS_WITH_AS(resolve_shard("1", std::nullopt, none), doctest::Contains("expected I/N"), ragkv::Error);
  CHECK_THROWS_WITH_AS(resolve_shard("a/2", std::nullopt, none), doctest::Contains("not a non-negative whole number"), ragkv::Error);
  CHECK_THROWS_WITH_AS(resolve_shard("", std::nullopt, env_of({{"SLURM_ARRAY_TASK_ID", "1"}})),
                       doctest::Contains("SLURM_ARRAY_TASK_COUNT"), ragkv::Error);
  CHECK_THROWS_WITH_AS(resolve_shard("0/0", std::nullopt, none), doctest::Contains("a shard count of 0"), ragkv::Error);
}

TEST_CASE("shard: three precompute shards store exactly what one process stores, each chunk once") {
  const ragkv::test::TempDir tmp("shard");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);  // tiny.store: one process
  const fs::path sharded = tmp.path / "sharded";
  size_t computed = 0;
  std::map<std::string, std::string> seen;
  for (int i = 0; i < 3; ++i) {
    const ragkv::test::Run r = ragkv::test::run_ragkv("precompute --index " + q(tiny.index) + " --store " + q(sharded) +
                                                      " --neighbours 1 --shard " + std::to_string(i) + "/3" + tiny.on_model);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const json s = json::parse(r.out);
    CHECK(s["shard"]["index"] == i);
    CHECK(s["shard"]["count"] == 3);
    CHECK(r.err.find("precompute: shard " + std::to_string(i) + "/3 (--shard)") != std::string::npos);
    computed += s["computed"].get<size_t>();
    // Disjoint: no file this shard wrote was written by an earlier one (files only ever added).
    const auto now = kv_files(sharded);
    for (const auto& [name, bytes] : seen) CHECK(now.at(name) == bytes);
    seen = now;
  }
  const json single = json::parse(tiny.precompute);
  CHECK(computed == single["computed"].get<size_t>());
  CHECK(kv_files(sharded) == kv_files(tiny.store));  // the same names, byte for byte
}
