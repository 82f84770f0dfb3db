// Sharded runs: the shard from --shard, Slurm's array variables or Kubernetes' completion index
// (with its count from a flag or RAGKV_SHARD_COUNT), malformed values refused naming their source;
// three shards of a precompute on one store compute disjoint chunk sets whose union is byte for
// byte what one process computes; answer and eval in three shards joined by `ragkv merge` equal
// one process's records and report, and merge refuses a missing or doubled shard; answer --resume
// picks up an interrupted shard's file.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/rag/answer-resume.h"
#include "core/util/shard.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ragkv::Shard;
using ragkv::resolve_shard;
constexpr auto q = &ragkv::test::shell_quote;
using ragkv::test::store_files;

// An environment of the given variables only.
auto env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}


}  // namespace

TEST_CASE("shard: from --shard, Slurm's array or Kubernetes' index, and errors that name their source") {
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
    const auto now = store_files(sharded);
    for (const auto& [name, bytes] : seen) CHECK(now.at(name) == bytes);
    seen = now;
  }
  const json single = json::parse(tiny.precompute);
  CHECK(computed == single["computed"].get<size_t>());
  CHECK(store_files(sharded) == store_files(tiny.store));  // the same names, byte for byte
}

TEST_CASE("shard: answer and eval in three shards, merged, equal one process's run") {
  const ragkv::test::TempDir tmp("shard-merge");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);
  const std::string queries = q(ragkv::test::testdata("rag-mini.queries.jsonl"));
  const std::string common = " --index " + q(tiny.index) + " --store " + q(tiny.store) + " --top-k 3 --max-tokens 3" +
                             tiny.on_model;
  auto run = [&](const std::string& args) {
    const ragkv::test::Run r = ragkv::test::run_ragkv(args);
    REQUIRE_MESSAGE(r.exit_code <= 1, r.err);  // eval: 1 when a mode fails the gate (a random model may)
    return r;
  };
  auto strip = [](std::vector<json> records) {  // timings aside
    for (json& r : records) {
      if (r.contains("metrics")) r.erase("metrics");
      if (r.contains("modes"))
        for (auto& [m, j] : r["modes"].items()) j.erase("metrics");
    }
    return records;
  };

  SUBCASE("answer, in full and prefix: the same records in the same order") {
    for (const char* mode : {"full", "prefix"}) {
      const fs::path one = tmp.path / (std::string(mode) + ".jsonl"), merged = tmp.path / (std::string(mode) + "-merged.jsonl");
      run("answer " + queries + common + " --mode " + mode + " --no-reorder --out " + q(one));
      std::string shards;
      for (int i = 0; i < 3; ++i) {
        const fs::path part = tmp.path / fmt::format("{}-{}.jsonl", mode, i);
        const ragkv::test::Run r = run("answer " + queries + common + " --mode " + mode + " --no-reorder --shard " +
                                       std::to_string(i) + "/3 --out " + q(part));
        CHECK(r.err.find("answer: shard " + std::to_string(i) + "/3 (--shard)") != std::string::npos);
        CHECK(ragkv::test::read_jsonl(part).size() == 4);  // 12 queries by line
        shards += " " + q(part);
      }
      const ragkv::test::Run m = run("merge --queries " + queries + " --out " + q(merged) + shards);
      CHECK(m.exit_code == 0);
      const auto a = ragkv::test::read_jsonl(one), b = ragkv::test::read_jsonl(merged);
      REQUIRE(a.size() == 12);
      CHECK(strip(a) == strip(b));
      // full computes every token either way; prefix reuses, in one process, the knowledge-tree
      // nodes earlier queries computed — a shard sees only its own queries', so it computes more.
      int64_t computed_one = 0, computed_shards = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        computed_one += a[i]["metrics"]["computed_tokens"].get<int64_t>();
        computed_shards += b[i]["metrics"]["computed_tokens"].get<int64_t>();
        if (std::string(mode) == "full") CHECK(a[i]["metrics"]["computed_tokens"] == b[i]["metrics"]["computed_tokens"]);
      }
      CHECK(computed_shards >= computed_one);
      MESSAGE(std::string(mode) << ": tokens computed by one process " << computed_one << ", by three shards " << computed_shards);
    }
    // A shard missing, or given twice: refused, naming the query and the files.
    const std::string p0 = q(tmp.path / "full-0.jsonl"), p1 = q(tmp.path / "full-1.jsonl");
    ragkv::test::Run r = ragkv::test::run_ragkv("merge --queries " + queries + " " + p0 + " " + p1);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("is in none of the 2 shard files") != std::string::npos);
    r = ragkv::test::run_ragkv("merge --queries " + queries + " " + p0 + " " + p0);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("two shards answered it") != std::string::npos);
  }
  SUBCASE("eval: shard records merged and resumed give the single run's report") {
    const std::string eval = "eval " + queries + common + " --modes prefix,reuse,blend";
    const json single = json::parse(run(eval + " --answers " + q(tmp.path / "one.jsonl")).out);
    std::string shards;
    for (int i = 0; i < 3; ++i) {
      const fs::path part = tmp.path / fmt::format("eval-{}.jsonl", i);
      run(eval + " --shard " + std::to_string(i) + "/3 --answers " + q(part));
      shards += " " + q(part);
    }
    const fs::path merged = tmp.path / "merged.jsonl";
    run("merge --queries " + queries + " --out " + q(merged) + shards);
    const ragkv::test::Run r = run(eval + " --answers " + q(merged) + " --resume");
    CHECK(r.err.find("resuming with 12 answered queries") != std::string::npos);
    const json all = json::parse(r.out);
    for (const char* m : {"full", "prefix", "reuse", "blend"})
      for (const char* k : {"f1_vs_baseline", "first_token_match", "kl_first_token", "compute_fraction"}) {
        CHECK_MESSAGE(all["modes"][m][k] == single["modes"][m][k], m << "." << k);
        CHECK_MESSAGE(all["modes"][m]["ci"].value(k, json()) == single["modes"][m]["ci"].value(k, json()), m << ".ci." << k);
      }
    CHECK(all["modes"]["blend"]["recovery"] == single["modes"]["blend"]["recovery"]);
  }
}

// Every file under dir with its size and mtime.
static std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> snapshot(const fs::path& dir) {
  std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().lexically_relative(dir).string()] = {e.file_size(), e.last_write_time()};
  return out;
}

TEST_CASE("shard: --read-only serving leaves the store as it was, and refuses what would write it") {
  const ragkv::test::TempDir tmp("read-only");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);
  const std::string answer = "answer " + q(ragkv::test::testdata("rag-mini.queries.jsonl")) + " --index " + q(tiny.index) +
                             " --store " + q(tiny.store) + " --limit 4 --top-k 3 --max-tokens 3 --mode craft" + tiny.on_model;
  const auto before = snapshot(tiny.store);
  ragkv::test::Run r = ragkv::test::run_ragkv(answer + " --read-only --out " + q(tmp.path / "ro.jsonl"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(snapshot(tiny.store) == before);
  // The same run without --read-only records its variant uses in the store (so the check above can fail).
  r = ragkv::test::run_ragkv(answer + " --out " + q(tmp.path / "rw.jsonl"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(snapshot(tiny.store) != before);
  CHECK(ragkv::test::read_jsonl(tmp.path / "ro.jsonl").size() == 4);
  for (const char* bad : {" --write-back", " --disk-budget 1MiB"}) {
    r = ragkv::test::run_ragkv(answer + " --read-only" + bad);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("--read-only with") != std::string::npos);
  }
}

TEST_CASE("shard: answer --resume keeps what an interrupted run wrote and answers the rest, conversations whole") {
  const ragkv::test::TempDir tmp("answer-resume");
  // queries_left: a conversation counts only when every turn is answered.
  std::vector<ragkv::Query> qs(4);
  for (size_t i = 0; i < qs.size(); ++i) qs[i].id = "q" + std::to_string(i);
  qs[1].conversation = qs[2].conversation = "c";
  const fs::path out = tmp.write("out.jsonl", "{\"id\":\"q0\",\"answer\":\"a\",\"mode\":\"full\"}\n"
                                              "{\"id\":\"q1\",\"answer\":\"b\",\"mode\":\"full\"}\n");
  ragkv::ResumedAnswers r = ragkv::read_answer_records(out.string(), "full", {"q0", "q1", "q2", "q3"});
  CHECK(r.from == out.string());
  const auto left = ragkv::queries_left(qs, r);
  REQUIRE(left.size() == 3);  // q1 dropped with its unfinished conversation: q1, q2 and q3 left
  CHECK(left[0].id == "q1");
  CHECK(r.lines.size() == 1);
  CHECK_THROWS_WITH_AS(ragkv::read_answer_records(out.string(), "prefix", {"q0", "q1"}),
                       doctest::Contains("out.jsonl:1: answered in mode \"full\", this run answers in prefix"), ragkv::Error);
  CHECK_THROWS_WITH_AS(ragkv::read_answer_records(out.string(), "full", {"q1"}),
                       doctest::Contains("out.jsonl:1: query q0 is not in the queries file"), ragkv::Error);

  // Through the binary: a run killed after five answers and half a line, resumed, equals one run.
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 0);
  const std::string answer = "answer " + q(ragkv::test::testdata("rag-mini.queries.jsonl")) + " --index " + q(tiny.index) +
                             " --store " + q(tiny.store) + " --top-k 3 --max-tokens 3 --mode prefix" + tiny.on_model;
  ragkv::test::Run run = ragkv::test::run_ragkv(answer + " --out " + q(tmp.path / "one.jsonl"));
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  const std::string one = ragkv::read_file(tmp.path / "one.jsonl");
  size_t cut = 0;
  for (int i = 0; i < 5; ++i) cut = one.find('\n', cut) + 1;
  tmp.write("resumed.jsonl.partial", one.substr(0, cut + 40));
  run = ragkv::test::run_ragkv(answer + " --out " + q(tmp.path / "resumed.jsonl") + " --resume");
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  CHECK(run.err.find("resuming with 5 answered queries") != std::string::npos);
  CHECK(run.err.find("unfinished last line dropped") != std::string::npos);
  auto strip = [](std::vector<json> v) {
    for (json& r : v) r.erase("metrics");
    return v;
  };
  CHECK(strip(ragkv::test::read_jsonl(tmp.path / "resumed.jsonl")) == strip(ragkv::test::read_jsonl(tmp.path / "one.jsonl")));
  CHECK_FALSE(fs::exists(tmp.path / "resumed.jsonl.partial"));
}
