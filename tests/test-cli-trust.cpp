// What a user can trust in an answer record, end to end on a tiny random model: each chunk's
// provenance, `--require exact` (never composed, full's output), the margin fallback live
// (`answer --fallback-margin`) and derived from eval's records (`eval --fallback-margins`), and a
// signed store (`--store-key`) against a planted cache.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/kv/chunk-kv-file.h"
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

TEST_CASE("cli trust: provenance per chunk, --require exact and the margin fallback") {
  const ragkv::test::TempDir tmp("cli-trust");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);
  const std::string queries = q(ragkv::test::testdata("rag-mini.queries.jsonl"));
  const std::string common = " --index " + q(tiny.index) + " --store " + q(tiny.store) +
                             " --limit 4 --top-k 3 --max-tokens 3 --no-reorder --compare full" + tiny.on_model;
  auto answer = [&](const std::string& flags, const char* name) {
    const fs::path out = tmp.path / name;
    const Run r = run_ragkv("answer " + queries + common + flags + " --out " + q(out));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return read_jsonl(out);
  };

  SUBCASE("reuse composes: the first chunk is an exact prefix, the others canonical caches moved") {
    for (const json& line : answer(" --mode reuse", "reuse.jsonl")) {
      const json& m = line["metrics"];
      CHECK(m["composed"] == true);
      CHECK_FALSE(m.contains("fallback"));
      const json& p = m["provenance"];
      REQUIRE(p.size() == line["chunks"].size());
      CHECK(p[0]["source"] == "exact_prefix");
      for (size_t i = 0; i < p.size(); ++i) {
        CHECK(p[i]["chunk"] == line["chunks"][i]);
        if (i > 0) CHECK(p[i]["source"] == "canonical");
        CHECK(p[i]["recomputed_tokens"] == 0);  // reuse recomputes nothing of a cached chunk
        CHECK(p[i]["tier"].is_string());
      }
      CHECK(m["first_step_margin"].get<double>() >= 0.0);
    }
  }
  SUBCASE("craft takes variants: their context chain is named") {
    size_t variants = 0;
    for (const json& line : answer(" --mode craft", "craft.jsonl"))
      for (const json& c : line["metrics"]["provenance"])
        if (c["source"] == "variant") {
          ++variants;
          CHECK(!c["context"].empty());
        }
    CHECK(variants > 0);  // precompute made one neighbour variant per chunk
  }
  SUBCASE("--require exact never composes: full's answers, exact prefixes and computed chunks only") {
    for (const json& line : answer(" --mode auto --require exact", "exact.jsonl")) {
      CHECK(line["metrics"]["composed"] == false);
      CHECK(line["answer"] == line["full_answer"]);
      CHECK(line["metrics"]["kl_first_token_vs_full"].get<double>() == 0.0);
      for (const json& c : line["metrics"]["provenance"])
        CHECK((c["source"] == "exact_prefix" || c["source"] == "computed"));
    }
  }
  SUBCASE("the margin fallback recomputes composed near-ties after their exact prefix, and counts both prefills") {
    const auto reuse = answer(" --mode reuse", "reuse.jsonl");
    const auto all = answer(" --mode reuse --fallback-margin 1", "all.jsonl");
    REQUIRE(all.size() == reuse.size());
    for (size_t i = 0; i < all.size(); ++i) {
      const json& m = all[i]["metrics"];
      CHECK(m["fallback"] == true);  // every composed prompt's gap is below 1
      CHECK(m["composed"] == false);
      CHECK(all[i]["answer"] == all[i]["full_answer"]);
      CHECK(m["kl_first_token_vs_full"].get<double>() == 0.0);  // prefix's rows are full's, bit for bit
      // The exact prefix (instruction and first chunk) is kept; the rest computed once more.
      const double n = m["prefill_tokens"].get<double>(), kept = m["exact_prefix_tokens"].get<double>();
      CHECK(kept > 0);
      CHECK(kept < n);
      CHECK(m["compute_fraction"].get<double>() ==
            doctest::Approx(reuse[i]["metrics"]["compute_fraction"].get<double>() + 1.0 - kept / n));
      const json& p = m["provenance"];
      CHECK(p[0]["source"] == "exact_prefix");
      for (size_t c = 1; c < p.size(); ++c) CHECK(p[c]["source"] == "computed");
    }
    // A margin between the recorded ones: exactly the composed prompts below it fall back.
    std::set<double> margins;
    for (const json& line : reuse) margins.insert(line["metrics"]["first_step_margin"].get<double>());
    REQUIRE(margins.size() >= 2);
    const double mid = (*margins.begin() + *std::next(margins.begin())) / 2;
    const auto some = answer(" --mode reuse --fallback-margin " + std::to_string(mid), "some.jsonl");
    REQUIRE(some.size() == reuse.size());
    size_t fell = 0;
    for (size_t i = 0; i < some.size(); ++i) {
      const bool below = reuse[i]["metrics"]["first_step_margin"].get<double>() < mid;
      CHECK(some[i]["metrics"].value("fallback", false) == below);
      if (below) CHECK(some[i]["answer"] == some[i]["full_answer"]);
      fell += below;
    }
    CHECK(fell >= 1);
    CHECK(fell < some.size());
  }
  SUBCASE("M/C falls back where prophet's unrepaired first pass had another first token") {
    const auto composed = answer(" --mode auto", "auto.jsonl");
    const auto moved = answer(" --mode auto --fallback-margin 0/1", "moved.jsonl");
    REQUIRE(moved.size() == composed.size());
    size_t fell = 0;
    for (size_t i = 0; i < composed.size(); ++i) {
      const json& b = composed[i]["metrics"];
      CHECK(b["first_pass_token"].is_number_integer());
      const bool back = moved[i]["metrics"].value("fallback", false);
      CHECK(back == b["repair_moved_first_token"].get<bool>());
      if (back) CHECK(moved[i]["answer"] == moved[i]["full_answer"]);
      fell += back;
    }
    CHECK(fell >= 1);  // on this model and these questions the repair moves one first token
  }
  SUBCASE("eval --fit-fallback stores auto's cheapest rule that passes the gate, and answer's auto uses it") {
    // A gate only full's own output passes (first-token KL at most 1e-6): auto alone fails it, and
    // of the rules only one that sends every composed prompt back passes.
    const std::string eval = "eval " + queries + " --index " + q(tiny.index) + " --store " + q(tiny.store) +
                             " --limit 4 --top-k 3 --max-tokens 3 --modes auto --min-agreement 0 --max-kl 0.000001" + tiny.on_model;
    const Run fit = run_ragkv(eval + " --fallback-margins 0,1 --fit-fallback");
    REQUIRE_MESSAGE(fit.exit_code == 0, fit.err);
    const json table = json::parse(fit.out)["fallback_fit"];
    REQUIRE(table.size() == 4);  // auto alone, each rule, then auto's default rule (0.003/0.02)
    CHECK(table[3]["rule"] == "0.003/0.02");
    CHECK(table[0]["passed"] == false);
    CHECK(table[2]["rule"] == "1");
    CHECK(table[2]["passed"] == true);
    std::ifstream settings(tiny.store / "craft.json");
    CHECK(json::parse(settings)["fallback"] == "1");
    for (const json& line : answer(" --mode auto", "fitted.jsonl")) {
      CHECK(line["metrics"].value("fallback", false) == true);  // every prompt here is composed
      CHECK(line["answer"] == line["full_answer"]);
    }
    for (const json& line : answer(" --mode auto --fallback-margin 0", "off.jsonl"))
      CHECK_FALSE(line["metrics"].contains("fallback"));
    // eval reports the store's rule beside auto without being asked.
    const Run again = run_ragkv(eval);
    CHECK(json::parse(again.out)["modes"].contains("auto fallback<1"));
    // Without auto, or without rules to try: a usage error.
    CHECK(run_ragkv(eval + " --fit-fallback").exit_code == 2);
  }
  SUBCASE("eval derives each margin's fallback from its records") {
    const fs::path records = tmp.path / "eval.jsonl";
    const Run r = run_ragkv("eval " + queries + " --index " + q(tiny.index) + " --store " + q(tiny.store) +
                            " --limit 4 --top-k 3 --max-tokens 3 --modes reuse,blend,auto --fallback-margins 0,1,0/1 --answers " +
                            q(records) + tiny.on_model);
    REQUIRE((r.exit_code == 0 || r.exit_code == 1));
    const json s = json::parse(r.out);
    // By hand from the records: a fallback adds the rows after the exact prefix to the compute.
    double again = 0, moved = 0;
    for (const json& line : read_jsonl(records)) {
      const json &reuse = line["modes"]["reuse"], &blend = line["modes"]["blend"], &autom = line["modes"]["auto"];
      const json &m = reuse["metrics"], &b = blend["metrics"], &a = autom["metrics"];
      if (m["composed"] == true)
        again += 1.0 - m["exact_prefix_tokens"].get<double>() / m["prefill_tokens"].get<double>();
      moved += a["composed"] == true && a["repair_moved_first_token"] == true;
      // blend's prophet pass computes the question over the moved canonical caches, as reuse does:
      // its first step is reuse's.
      CHECK(b["first_pass_token"] == reuse["output_ids"][0]);
      CHECK(b["first_pass_margin"].get<double>() == doctest::Approx(m["first_step_margin"].get<double>()).epsilon(1e-6));
      CHECK(a["repair_moved_first_token"] == (a["first_pass_token"] != autom["output_ids"][0]));
      CHECK_FALSE(m.contains("first_pass_token"));  // reuse has no such pass
    }
    CHECK(moved >= 1);
    CHECK(s["modes"]["auto fallback<0/1"]["fallbacks"].get<double>() == moved);
    CHECK(s["modes"]["reuse fallback<0/1"]["fallbacks"] == 0.0);  // reuse has no unrepaired pass to compare
    const json &reuse = s["modes"]["reuse"], &none = s["modes"]["reuse fallback<0"], &all = s["modes"]["reuse fallback<1"];
    CHECK(none["fallbacks"] == 0.0);
    CHECK(none["first_token_match"] == reuse["first_token_match"]);
    CHECK(none["compute_fraction"] == reuse["compute_fraction"]);
    CHECK(all["fallbacks"].get<double>() == doctest::Approx(4 * reuse["composed_share"].get<double>()));
    CHECK(all["first_token_match"] == 1.0);
    CHECK(all["kl_first_token"] == 0.0);
    CHECK(all["compute_fraction"].get<double>() == doctest::Approx(reuse["compute_fraction"].get<double>() + again / 4));
    CHECK(s["gate"]["verdicts"].size() == 3);  // the derived modes are reported, not gated
    // but auto is gated as answer runs it: under its default rule, not before any fallback.
    std::vector<std::string> gated;
    for (const json& v : s["gate"]["verdicts"]) gated.push_back(v.get<std::string>().substr(0, v.get<std::string>().find(':')));
    CHECK(gated == std::vector<std::string>{"reuse", "blend", "auto fallback<0.003/0.02"});
  }
}

// KV-cache hijacking end to end: a store precomputed with --store-key; someone who can write the
// store but has no key replaces a chunk's canonical cache by the KV of one of its variants
// (computed after other chunks, at other positions) under the canonical header, checksums valid.
TEST_CASE("cli trust: a planted cache is used without a key and rejected with one") {
  const ragkv::test::TempDir tmp("cli-trust-hijack");
  const ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);
  const fs::path key = tmp.path / "store.key", store = tmp.path / "signed";
  std::ofstream(key) << "0123456789abcdef0123456789abcdef";
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  const std::string keyed = " --store-key " + q(key);
  Run r = run_ragkv("precompute --index " + q(tiny.index) + " --store " + q(store) + " --neighbours 1" + keyed + tiny.on_model);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string queries = q(ragkv::test::testdata("rag-mini.queries.jsonl"));
  const std::string common = " --index " + q(tiny.index) + " --store " + q(store) +
                             " --limit 1 --top-k 3 --max-tokens 3 --mode reuse --no-reorder" + tiny.on_model;
  auto answer = [&](const std::string& flags, const char* name) {
    const fs::path out = tmp.path / name;
    const Run a = run_ragkv("answer " + queries + common + flags + " --out " + q(out));
    REQUIRE_MESSAGE(a.exit_code == 0, a.err);
    return read_jsonl(out).at(0);
  };
  const json before = answer(keyed, "before.jsonl");
  CHECK(before["metrics"]["cache_bad"] == 0);
  REQUIRE(before["metrics"]["provenance"][0]["source"] == "exact_prefix");

  // The plant: the first chunk's canonical file rewritten with a variant's KV, no key.
  const std::string first = before["chunks"][0];
  fs::path canonical, variant;
  for (const auto& e : fs::directory_iterator(store / "kv")) {
    if (e.path().extension() != ".rkv") continue;
    const ragkv::ChunkKvReader f = ragkv::ChunkKvReader::open_any(e.path());
    if (f.meta().chunk_id != first) continue;
    (f.meta().context.empty() ? canonical : variant) = e.path();
  }
  REQUIRE(!canonical.empty());
  REQUIRE(!variant.empty());
  {
    const ragkv::ChunkKvReader c = ragkv::ChunkKvReader::open_any(canonical), v = ragkv::ChunkKvReader::open_any(variant);
    std::vector<std::vector<uint16_t>> k(v.meta().n_layer), vv(v.meta().n_layer);
    std::vector<const uint16_t*> kp, vp;
    for (uint32_t l = 0; l < v.meta().n_layer; ++l) {
      k[l].resize(v.layer_bytes() / 4);
      vv[l].resize(v.layer_bytes() / 4);
      v.read_layer(int(l), k[l].data(), vv[l].data());
      kp.push_back(k[l].data());
      vp.push_back(vv[l].data());
    }
    ragkv::write_chunk_kv(canonical, c.meta(), kp, vp, nullptr, v.encoding());
  }
  // Without the key the plant is used as the chunk's exact prefix: undetectable.
  const json blind = answer("", "blind.jsonl");
  CHECK(blind["metrics"]["cache_bad"] == 0);
  CHECK(blind["metrics"]["provenance"][0]["source"] == "exact_prefix");
  // With it: rejected, counted, computed — the answer is the one made before the plant.
  const json keyed_after = answer(keyed, "after.jsonl");
  CHECK(keyed_after["metrics"]["cache_bad"].get<int>() >= 1);
  CHECK(keyed_after["metrics"]["provenance"][0]["source"] == "computed");
  CHECK(keyed_after["answer"] == before["answer"]);
  // store verify with the key names it; without the key it passes.
  CHECK(run_ragkv("store verify --store " + q(store)).exit_code == 0);
  r = run_ragkv("store verify --store " + q(store) + keyed);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("not signed") != std::string::npos);
}
