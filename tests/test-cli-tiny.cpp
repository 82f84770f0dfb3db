// The whole pipeline end to end on a tiny random model (make-test-model): build-index, precompute
// with neighbour variants, answer in the default mode against full, eval of every mode, and
// generate with sampling and stop strings. Seconds in the Release build, so the sanitizer suite
// runs it too (the real-model end-to-end tests run in the Release suite only).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using ragkv::test::Run;
using ragkv::test::run_ragkv;

namespace {

constexpr auto q = &ragkv::test::shell_quote;
using ragkv::test::read_jsonl;

}  // namespace

TEST_CASE("cli tiny: index, precompute, answer and eval every mode on a random model") {
  const ragkv::test::TempDir tmp("cli-tiny");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);
  const fs::path &index = tiny.index, &store = tiny.store;
  const std::string& on_model = tiny.on_model;
  Run r;
  const json pc = json::parse(tiny.precompute);
  CHECK(pc["computed"].get<int>() > 0);
  CHECK(pc["variants"]["computed"].get<int>() > 0);

  const std::string queries = q(ragkv::test::testdata("rag-mini.queries.jsonl"));
  const std::string common = " --index " + q(index) + " --store " + q(store) + " --limit 3 --top-k 2 --max-tokens 3" + on_model;
  const fs::path answers = tmp.path / "answers.jsonl", prefix = tmp.path / "prefix.jsonl";
  r = run_ragkv("answer " + queries + common + " --compare full --out " + q(answers));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto a = read_jsonl(answers);
  REQUIRE(a.size() == 3);
  CHECK(a[0]["mode"] == "auto");
  CHECK(a[0].contains("full_answer"));
  CHECK(a[0]["metrics"].contains("kl_first_token_vs_full"));
  // prefix reuses exact prefixes only: its answers are full's.
  r = run_ragkv("answer " + queries + common + " --mode prefix --compare full --out " + q(prefix));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const json& line : read_jsonl(prefix)) CHECK(line["answer"] == line["full_answer"]);

  const fs::path records = tmp.path / "records.jsonl", report = tmp.path / "report.md";
  r = run_ragkv("eval " + queries + common + " --modes prefix,reuse,blend,craft,auto --answers " + q(records) +
                " --report " + q(report));
  CAPTURE(r.err);
  REQUIRE((r.exit_code == 0 || r.exit_code == 1));  // 1: a mode failed the gate, which a random model may
  const json s = json::parse(r.out);
  for (const char* m : {"prefix", "reuse", "blend", "craft", "auto"}) CHECK(s["modes"].contains(m));
  CHECK(s["modes"]["prefix"]["kl_first_token"].get<double>() == 0.0);
  CHECK(s["modes"]["prefix"]["identical_output"].get<double>() == 1.0);
  CHECK(read_jsonl(records).size() == 3);
  CHECK(fs::file_size(report) > 0);
}

TEST_CASE("cli tiny: generate samples reproducibly by seed and stops at a stop string") {
  const ragkv::test::TempDir tmp("cli-tiny-generate");
  const fs::path model = tmp.path / "tiny.gguf";
  REQUIRE(run_ragkv("make-test-model --arch llama --layers 1 --embd 32 --heads 2 --kv-heads 1 --ff 64 --context 64 --out " +
                    q(model)).exit_code == 0);
  const std::string gen = "generate --json --threads 1 --max-tokens 16 --model " + q(model) + " --prompt 'abc'";
  auto ids = [](const Run& r) {
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return json::parse(r.out)["output_ids"].get<std::vector<int>>();
  };
  const auto greedy = ids(run_ragkv(gen));
  const auto s1 = ids(run_ragkv(gen + " --temperature 1.5 --seed 1"));
  CHECK(s1 == ids(run_ragkv(gen + " --temperature 1.5 --seed 1")));
  CHECK(s1 != ids(run_ragkv(gen + " --temperature 1.5 --seed 2")));
  CHECK(greedy == ids(run_ragkv(gen + " --temperature 0 --seed 5")));
  CHECK(greedy == ids(run_ragkv(gen + " --temperature 1.5 --top-p 0")));  // the nucleus is the top token alone
  // A stop string made of the greedy text's first byte piece ends the text before it.
  const Run text = run_ragkv(gen);
  const std::string t = json::parse(text.out)["text"];
  REQUIRE(!t.empty());
  const Run stopped = run_ragkv(gen + " --stop " + q(fs::path(t.substr(0, 1))));
  REQUIRE(stopped.exit_code == 0);
  CHECK(json::parse(stopped.out)["text"] == "");
  CHECK(run_ragkv(gen + " --temperature -1").exit_code == 2);
}

TEST_CASE("cli tiny: a 12-turn conversation computes no more tokens than each turn's prompt holds") {
  // Each turn reuses the previous turn's prompt KV as an exact prefix, and prophet's second pass
  // recomputes only its share of the rows the first pass computed: no turn computes its history
  // again, let alone twice.
  const ragkv::test::TempDir tmp("cli-tiny-conversation");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 0, 8192);
  const fs::path &index = tiny.index, &store = tiny.store;
  const std::string& on_model = tiny.on_model;
  Run r;
  const fs::path conv = tmp.path / "conversation.jsonl";
  {
    std::vector<json> qs;
    for (const json& j : read_jsonl(ragkv::test::testdata("rag-mini.queries.jsonl")))
      if (j.contains("passages")) qs.push_back(j);
    REQUIRE(!qs.empty());
    std::ofstream out(conv);
    for (int t = 0; t < 12; ++t) {
      json j = qs[size_t(t) % qs.size()];
      j["id"] = fmt::format("turn-{}", t + 1);
      j["conversation"] = "c";
      j["turn"] = t + 1;
      j["passages"] = std::vector<json>(j["passages"].begin(), j["passages"].begin() + std::min<ptrdiff_t>(2, j["passages"].size()));
      out << j.dump() << "\n";
    }
  }
  for (const char* mode : {"blend", "auto"}) {
    const fs::path out = tmp.path / fmt::format("{}.jsonl", mode);
    r = run_ragkv("answer " + q(conv) + " --index " + q(index) + " --store " + q(store) + " --mode " + mode +
                  " --max-tokens 4" + on_model + " --out " + q(out));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const auto lines = read_jsonl(out);
    REQUIRE(lines.size() == 12);
    for (const json& line : lines) {
      CAPTURE(mode);
      CAPTURE(line["id"]);
      CHECK(line["metrics"]["computed_tokens"].get<double>() <= line["metrics"]["prefill_tokens"].get<double>());
    }
    CHECK(lines.back()["metrics"]["history_turns"].get<int>() == 11);
  }
}
