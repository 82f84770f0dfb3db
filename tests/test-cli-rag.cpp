// `ragkv precompute`, `answer` and `eval` end to end on testdata/rag-mini (6 SQuAD passages, 12
// questions) with the default models: the whole pipeline, the quality gate's exit codes, bad
// query lines and passage ids, and a precompute killed mid-way that resumes.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>

#include "core/backend/quant-kernels.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ragkv::test::TempDir;

using ragkv::test::Run;
using ragkv::test::run_ragkv;

using ragkv::test::read_jsonl;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

constexpr auto q = &ragkv::test::shell_quote;

// A built index of testdata/rag-mini in a fresh directory, in fixed windows: the records below name
// its chunks by position ("Warsaw#0#0").
struct MiniIndex {
  TempDir dir{"cli-rag"};
  fs::path index = dir.path / "index", store = dir.path / "store";
  fs::path queries = ragkv::test::testdata("rag-mini.queries.jsonl");
  MiniIndex() {
    const Run r = run_ragkv("build-index --threads 2 --chunking fixed --corpus " +
                            q(ragkv::test::testdata("rag-mini.corpus.jsonl")) + " --out " + q(index));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  }
  Run run(const std::string& args) const { return run_ragkv(args); }
};

}  // namespace

TEST_CASE("cli rag: precompute, answer and eval on a tiny index" * doctest::test_suite("real-model")) {
  MiniIndex m;
  // A partial store, then the rest: the first run's chunks are not redone.
  Run r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(m.store) + " --limit 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json j = json::parse(r.out);
  CHECK(j["computed"] == 3);
  CHECK(j["kv_bytes_per_token"] == 23040.0);  // 30 layers × K,V × 192 × 2 bytes
  CHECK(j["variants"]["source"] == "neighbours");  // each chunk after its 2 nearest: a variant each
  CHECK(j["variants"]["computed"] == 3);
  r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(m.store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  j = json::parse(r.out);
  CHECK(j["skipped"] == 3);
  CHECK(j["computed"] == 3);
  CHECK(j["variants"]["skipped"] == 3);
  CHECK(j["variants"]["computed"] == 3);
  CHECK(j["store_files"] == 13);  // prefix + 6 chunks + 6 neighbour variants

  // answer: blend, compared with full; answers in input order with the metrics of DESIGN.md §1.
  const fs::path answers = m.dir.path / "answers.jsonl", summary = m.dir.path / "summary.json";
  r = m.run("answer " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --limit 4 --max-tokens 6 --top-k 3 --compare full --out " + q(answers) + " --summary " + q(summary));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto lines = read_jsonl(answers);
  REQUIRE(lines.size() == 4);
  const auto in = read_jsonl(m.queries);
  for (size_t i = 0; i < lines.size(); ++i) {
    CHECK(lines[i]["id"] == in[i]["id"]);
    CHECK(lines[i]["mode"] == "auto");  // the default with a store
    const json& mt = lines[i]["metrics"];
    for (const char* k : {"ttft_ms", "retrieval_ms", "prefill_tokens", "computed_tokens", "reused_tokens",
                          "compute_fraction", "decode_ms", "output_tokens", "cache_hits", "f1", "em", "f1_vs_full",
                          "rougeL_vs_full", "first_token_match"})
      CHECK_MESSAGE(mt.contains(k), k);
    CHECK(mt["compute_fraction"].get<double>() < 0.6);
    CHECK(mt["cache_misses"] == 0);
    CHECK(lines[i].contains("full_answer"));
  }
  CHECK(lines[0]["chunks"].size() == 3);  // pinned passages (one chunk each), in their order
  CHECK(lines[0]["chunks"][0] == "Warsaw#0#0");
  CHECK(json::parse(std::ifstream(summary))["queries"] == 4);
  CHECK(r.err.find("answer summary") != std::string::npos);

  // eval: the report (the gate switched off), then the gate's decisions.
  const fs::path md = m.dir.path / "report.md", js = m.dir.path / "report.json", records = m.dir.path / "records.jsonl";
  const std::string gate_off = " --min-agreement 0 --max-kl -1";
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes prefix,reuse,blend --limit 3 --max-tokens 6 --top-k 3" + gate_off + " --report " + q(js) +
            " --answers " + q(records));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json rep = json::parse(std::ifstream(js));
  CHECK(rep["baseline"] == "full");
  CHECK(rep["queries"] == 3);
  for (const char* mode : {"full", "prefix", "reuse", "blend"}) {
    const json& e = rep["modes"][mode];
    for (const char* k : {"f1", "em", "f1_vs_baseline", "rougeL_vs_baseline", "first_token_match", "kl_first_token",
                          "compute_fraction", "ttft_ms", "ttft_ratio", "quality_ratio"})
      CHECK_MESSAGE(e.contains(k), mode << "." << k);
  }
  CHECK(rep["modes"]["prefix"]["identical_output"] == 1.0);
  CHECK(rep["modes"]["prefix"]["kl_first_token"] == 0.0);
  CHECK(rep["modes"]["full"]["compute_fraction"] == 1.0);
  CHECK(rep["modes"]["reuse"]["compute_fraction"].get<double>() < rep["modes"]["blend"]["compute_fraction"].get<double>());
  CHECK(json::parse(r.out)["modes"].size() == 4);
  CHECK(rep["reference"] == "reuse");
  CHECK(rep["modes"]["prefix"]["recovery"]["kl"]["mean"] == 1.0);  // reuse's damage all repaired
  CHECK(rep["modes"]["reuse"]["recovery"]["kl"]["mean"] == 0.0);
  CHECK(rep["modes"]["full"]["reused_recompute_fraction"].is_null());  // nothing reused
  CHECK(rep["modes"]["prefix"]["reused_recompute_fraction"] == 0.0);   // reused exactly, never recomputed
  const double real = rep["modes"]["blend"]["reused_recompute_fraction"];
  CHECK(real > rep["modes"]["reuse"]["reused_recompute_fraction"].get<double>());
  CHECK(real < 0.5);
  CHECK(rep["gate"]["passed"] == true);
  CHECK(rep["gate"]["checks"].empty());

  // --batch 5: the (query, mode) answers decoded together; the same records, in input order.
  const fs::path records_b = m.dir.path / "records-batched.jsonl";
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes prefix,reuse,blend --limit 3 --max-tokens 6 --top-k 3 --batch 5" + gate_off + " --answers " + q(records_b));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  {
    const auto a = read_jsonl(records), b = read_jsonl(records_b);
    REQUIRE(a.size() == 3);
    REQUIRE(b.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(b[i]["id"] == a[i]["id"]);
      for (const char* mode : {"full", "prefix", "reuse", "blend"}) {
        CHECK(b[i]["modes"][mode]["output_ids"] == a[i]["modes"][mode]["output_ids"]);
        CHECK(b[i]["modes"][mode]["kl_first_token_vs_baseline"] == a[i]["modes"][mode]["kl_first_token_vs_baseline"]);
      }
    }
  }

  // --resume after a run killed while writing its second record: the first record is kept, the
  // cut line dropped, the rest answered; the report is the uninterrupted run's.
  const auto full_records = read_jsonl(records);
  REQUIRE(full_records.size() == 3);
  {
    const std::string second = full_records[1].dump();
    std::ofstream(records.string() + ".partial") << full_records[0].dump() << "\n" << second.substr(0, second.size() / 2);
    fs::remove(records);
  }
  const std::string resume_args = "eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " +
                                  q(m.store) + " --modes prefix,reuse,blend --limit 3 --top-k 3" + gate_off +
                                  " --answers " + q(records) + " --resume";
  r = m.run(resume_args + " --max-tokens 6");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("resuming with 1 answered queries") != std::string::npos);
  CHECK(r.err.find("unfinished last line dropped") != std::string::npos);
  const auto resumed = read_jsonl(records);
  REQUIRE(resumed.size() == 3);
  CHECK_FALSE(fs::exists(records.string() + ".partial"));
  const json rep2 = json::parse(r.out);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(resumed[i]["id"] == full_records[i]["id"]);
    CHECK(resumed[i]["modes"]["blend"]["output_ids"] == full_records[i]["modes"]["blend"]["output_ids"]);
  }
  for (const char* mode : {"prefix", "reuse", "blend"})
    for (const char* k : {"f1", "f1_vs_baseline", "first_token_match", "identical_output", "kl_first_token", "compute_fraction"})
      CHECK_MESSAGE(rep2["modes"][mode][k] == rep["modes"][mode][k], mode << "." << k);
  // A finished file resumes with nothing left to answer; other settings are refused, naming the line.
  r = m.run(resume_args + " --max-tokens 6");
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("resuming with 3 answered queries") != std::string::npos);
  r = m.run(resume_args + " --max-tokens 5");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("records.jsonl:1: made with other settings") != std::string::npos);
  // Records carry the engine: another thread count (its timings) is another engine, refused.
  CHECK(resumed[0]["engine"]["threads"] == 2);
  CHECK(resumed[0]["engine"]["device"] == "cpu");
  CHECK(resumed[0]["engine"]["binary"].get<std::string>().size() == 16);
  std::string one_thread = resume_args + " --max-tokens 6";
  one_thread.replace(one_thread.find("--threads 2"), 11, "--threads 1");
  r = m.run(one_thread);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("records.jsonl:1: made by another engine") != std::string::npos);
  // So are other kernels of the same binary (another rounding): the portable ones here.
  const std::string kernels = resumed[0]["engine"]["kernels"].get<std::string>();
  CHECK_FALSE(kernels.empty());
  if (kernels != "scalar+f32") {
    const ragkv::test::ScopedEnv portable("RAGKV_CPU_KERNELS", "scalar");
    r = m.run(resume_args + " --max-tokens 6");
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("records.jsonl:1: made by another engine") != std::string::npos);
  }

  // The default gate (agreement and KL with full at the pessimistic end of the interval): prefix
  // passes, reuse fails, one line per mode naming the failed threshold; JUnit has a test case per
  // mode and threshold; the Markdown report gives the verdict first.
  const fs::path junit = m.dir.path / "gate.xml";
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes prefix,reuse --limit 4 --max-tokens 4 --top-k 3 --report " + q(md) + " --junit " + q(junit));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("eval gate: prefix: pass") != std::string::npos);
  CHECK(r.err.find("eval gate: reuse: FAIL first-token") != std::string::npos);
  std::ifstream mdf(md);
  const std::string mds((std::istreambuf_iterator<char>(mdf)), {});
  CHECK(mds.find("# ragkv eval\n\n**Gate: FAIL**\n\n- prefix: pass\n- reuse: FAIL") == 0);
  CHECK(mds.find("| reuse |") != std::string::npos);
  std::ifstream jf(junit);
  const std::string xml((std::istreambuf_iterator<char>(jf)), {});
  CHECK(xml.find("tests=\"4\"") != std::string::npos);  // 2 modes x (min-agreement, max-kl)
  CHECK(xml.find("<testcase classname=\"ragkv-eval.prefix\" name=\"min-agreement\"><system-out>") != std::string::npos);
  CHECK(xml.find("<testcase classname=\"ragkv-eval.reuse\" name=\"max-kl\"><failure") != std::string::npos);

  // A sweep: each blend variant once per ratio, reuse added as the reference, the trade-off data,
  // script and (with gnuplot installed) picture beside the report, linked from it.
  const fs::path sweep_md = m.dir.path / "sweep.md";
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes blend/v,blend/prophet --sweep 0.1,0.3 --limit 2 --max-tokens 2 --top-k 3" + gate_off +
            " --report " + q(sweep_md));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json sw = json::parse(r.out);
  for (const char* mode : {"full", "reuse", "blend/v@0.1", "blend/v@0.3", "blend/prophet@0.1", "blend/prophet@0.3"})
    CHECK_MESSAGE(sw["modes"].contains(mode), mode);
  CHECK(sw["modes"]["blend/v@0.3"]["nominal_ratio"] == 0.3);
  CHECK(sw["modes"]["blend/v@0.1"]["reused_recompute_fraction"].get<double>() <
        sw["modes"]["blend/v@0.3"]["reused_recompute_fraction"].get<double>());
  CHECK(fs::exists(m.dir.path / "sweep.dat"));
  CHECK(fs::exists(m.dir.path / "sweep.gp"));
  std::ifstream swf(sweep_md);
  const std::string sws((std::istreambuf_iterator<char>(swf)), {});
  if (fs::exists(m.dir.path / "sweep.svg")) CHECK(sws.find("](sweep.svg)") != std::string::npos);
  else MESSAGE("no sweep.svg (gnuplot missing?): " << r.err);

  // The gold-F1 ratio is a gate only when asked for; nothing reaches a ratio of 10.
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes prefix --limit 1 --max-tokens 4 --top-k 3 --min-quality-ratio 10");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("prefix: FAIL gold-F1 ratio to the baseline 1.000 < 10.000") != std::string::npos);

  // The cache manager and query order (RAGCache §5.1–5.2): two pairs of queries over the same
  // chunk sequences, interleaved. Reordered, each pair is answered back to back; answers are still
  // written in input order, and the second of a pair reuses the knowledge-tree path its first
  // computed (both chunks, exactly: the answers are full's). With a disk budget the chain nodes
  // persist in the store, and a later run in input order finds them there.
  const fs::path pairs = m.dir.path / "pairs.jsonl";
  {
    std::ofstream f(pairs);
    f << R"({"id": "w1", "question": "What was Maria Curie the first female recipient of?", "passages": ["Warsaw#0", "Normans#5"]})" "\n"
      << R"({"id": "m1", "question": "Who was Martin Luther?", "passages": ["Martin_Luther#2", "Nikola_Tesla#5"]})" "\n"
      << R"({"id": "w2", "question": "Where did Curie study?", "passages": ["Warsaw#0", "Normans#5"]})" "\n"
      << R"({"id": "m2", "question": "Where did Tesla work?", "passages": ["Martin_Luther#2", "Nikola_Tesla#5"]})" "\n";
  }
  const std::string pair_args = "answer " + q(pairs) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
                                " --mode prefix --max-tokens 4 --compare full";
  const fs::path reordered = m.dir.path / "reordered.jsonl", reordered_sum = m.dir.path / "reordered.json";
  r = m.run(pair_args + " --host-budget 64MiB --disk-budget 64MiB --batch 1 --out " + q(reordered) + " --summary " + q(reordered_sum));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto ra = read_jsonl(reordered);
  REQUIRE(ra.size() == 4);
  const std::vector<std::string> ids{"w1", "m1", "w2", "m2"};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(ra[i]["id"] == ids[i]);
    CHECK(ra[i]["answer"] == ra[i]["full_answer"]);
    CHECK(ra[i]["metrics"]["first_token_match"] == true);
  }
  // Within a pair the first answered computes the second chunk, the other reuses it.
  for (size_t i = 0; i < 2; ++i)
    CHECK(ra[i]["metrics"]["exact_path_chunks"].get<int>() + ra[i + 2]["metrics"]["exact_path_chunks"].get<int>() == 3);
  const json rs = json::parse(std::ifstream(reordered_sum));
  CHECK(rs["reordered"] == true);
  CHECK(rs["order_runs"] == 4);  // the m pair, then the w pair: no two consecutive in input order
  CHECK(rs["cache_manager"]["policy"] == "pgdsf");
  CHECK(rs["cache_manager"]["tiers"]["host"]["bytes"].get<uint64_t>() <= rs["cache_manager"]["tiers"]["host"]["budget"].get<uint64_t>());
  CHECK(rs["cache_hits_per_tier"]["host"].get<double>() > 0);
  size_t chain_files = 0;
  for (const auto& e : fs::directory_iterator(m.store / "kv")) chain_files += e.path().filename().string().ends_with(".chain.rkv");
  CHECK(chain_files == 0);  // the host budget held them: nothing was evicted to the disk
  // Decoded together (--batch 3): the same answers, the same reuse, in input order.
  const fs::path batched = m.dir.path / "batched.jsonl", batched_sum = m.dir.path / "batched.json";
  r = m.run(pair_args + " --host-budget 64MiB --disk-budget 64MiB --batch 3 --out " + q(batched) + " --summary " + q(batched_sum));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto ba = read_jsonl(batched);
  REQUIRE(ba.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(ba[i]["id"] == ids[i]);
    CHECK(ba[i]["answer"] == ra[i]["answer"]);
    CHECK(ba[i]["full_answer"] == ra[i]["full_answer"]);
    CHECK(ba[i]["metrics"]["exact_path_chunks"] == ra[i]["metrics"]["exact_path_chunks"]);
  }
  const json bs = json::parse(std::ifstream(batched_sum));
  CHECK(bs["batch"] == 3);
  CHECK(rs["batch"] == 1);
  CHECK(bs["answers_per_s"].get<double>() > 0);
  CHECK(bs["mean_decode_batch"].get<double>() > 1.0);  // answers were decoded together
  CHECK(rs["mean_decode_batch"].get<double>() == 1.0);

  // A host budget too small for any chunk: computed chain nodes go to the disk store, and a run in
  // input order reads them back from there.
  r = m.run(pair_args + " --host-budget 1 --disk-budget 64MiB --no-reorder --out " + q(reordered));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const auto& e : fs::directory_iterator(m.store / "kv")) chain_files += e.path().filename().string().ends_with(".chain.rkv");
  CHECK(chain_files == 2);
  const fs::path again = m.dir.path / "again.jsonl", again_sum = m.dir.path / "again.json";
  r = m.run(pair_args + " --host-budget 1 --disk-budget 64MiB --no-reorder --out " + q(again) + " --summary " + q(again_sum));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto aa = read_jsonl(again);
  REQUIRE(aa.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(aa[i]["id"] == ids[i]);
    CHECK(aa[i]["answer"] == ra[i]["answer"]);
    CHECK(aa[i]["metrics"]["exact_path_chunks"] == 2);  // from the store's chain files
  }
  const json as = json::parse(std::ifstream(again_sum));
  CHECK(as["reordered"] == false);
  CHECK(as["order_runs"] == 1);
  CHECK(as["exact_path_chunks"] == 8.0);
}

TEST_CASE("cli rag: Cache-Craft variants, craft and auto, write-back under a budget, alpha fitted" * doctest::test_suite("real-model")) {
  MiniIndex m;
  Run r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(m.store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string gate_off = " --min-agreement 0 --max-kl -1";
  const fs::path js = m.dir.path / "craft.json", md = m.dir.path / "craft.md";
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes craft,craft/no-focus,craft/random,auto --limit 3 --max-tokens 4 --top-k 3" + gate_off +
            " --report " + q(js));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json rep = json::parse(std::ifstream(js));
  for (const char* mode : {"craft", "craft/no-focus", "craft/random", "auto"}) {
    REQUIRE_MESSAGE(rep["modes"].contains(mode), mode);
    const json& c = rep["modes"][mode]["craft"];
    CHECK(c["variant_share"].get<double>() > 0);  // neighbour variants were chosen
    CHECK(c["exact_share"].get<double>() > 0);    // the first chunk: its canonical cache is exact
    CHECK(c["mean_cfo"].get<double>() > 0);
    CHECK(c["fix_tokens_per_query"].get<double>() > 0);
  }
  CHECK(rep["modes"]["craft/no-focus"]["craft"]["cutoff_share"] == 0.0);
  // The fix tokens of no-focus are recomputed on every layer: more compute than with focus.
  CHECK(rep["modes"]["craft/no-focus"]["reused_recompute_fraction"].get<double>() >=
        rep["modes"]["craft"]["reused_recompute_fraction"].get<double>());
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes craft --limit 2 --max-tokens 2 --top-k 3 --report " + q(md) + gate_off);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(slurp(md).find("Cache-Craft's choices") != std::string::npos);

  // Eq. 13: with the gate off every alpha passes, so the smallest is stored and becomes the default.
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes craft --sweep 0.2,0.6 --fit-alpha --limit 2 --max-tokens 2 --top-k 3" + gate_off);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json cs = json::parse(std::ifstream(m.store / "craft.json"));
  CHECK(cs["alpha"] == 0.2);
  CHECK(cs["alpha_fit"]["candidates"].size() == 2);
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes reuse --fit-alpha --limit 1 --max-tokens 2 --top-k 3" + gate_off);
  CHECK(r.exit_code == 2);  // nothing to fit

  // Write-back: a store with 2 of the 6 chunks and room for 2 variants; the chunks prompts
  // compute become variants of their context, never more than the budget, canonical files untouched.
  const fs::path small = m.dir.path / "small";
  r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(small) +
            " --limit 2 --neighbours 0 --max-variants 2");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::map<std::string, std::string> canonical;
  for (const auto& e : fs::directory_iterator(small / "kv")) canonical[e.path().filename()] = slurp(e.path());
  r = m.run("answer " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(small) +
            " --limit 6 --max-tokens 2 --top-k 3 --write-back --out " + q(m.dir.path / "wb.jsonl"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("\"variants_written\":0.0") == std::string::npos);
  size_t variants = 0;
  for (const auto& e : fs::directory_iterator(small / "kv")) {
    const std::string name = e.path().filename();
    if (canonical.count(name)) {
      CHECK(slurp(e.path()) == canonical[name]);
    } else {
      ++variants;
      CHECK(name.size() == 37);  // <chunk>.<context>.rkv
    }
  }
  CHECK(variants >= 1);
  CHECK(variants <= 2);
}

TEST_CASE("cli rag: eval takes the baseline from --baseline-cache when the prompt and settings match" * doctest::test_suite("real-model")) {
  MiniIndex m;
  Run r = m.run("precompute --threads 2 --neighbours 0 --index " + q(m.index) + " --store " + q(m.store) + " --limit 2");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const fs::path cache = m.dir.path / "baseline.jsonl";
  const std::string args = "eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
                           " --modes reuse --limit 2 --top-k 3 --min-agreement 0 --max-kl -1 --baseline-cache " +
                           q(cache);
  r = m.run(args + " --max-tokens 4");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json first = json::parse(r.out);
  CHECK(first["baseline_cache"]["taken"] == 0);
  CHECK(read_jsonl(cache).size() == 2);
  // The same run again: both baselines from the file, the comparison exactly as computed; the
  // report says its TTFT ratios pair timings of different runs.
  const fs::path report = m.dir.path / "cached.md";
  r = m.run(args + " --max-tokens 4 --report " + q(report));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json second = json::parse(r.out);
  CHECK(second["baseline_cache"]["taken"] == 2);
  CHECK(slurp(report).find("TTFT ratios then pair timings made at different times") != std::string::npos);
  CHECK(read_jsonl(cache).size() == 2);
  for (const char* k : {"f1", "f1_vs_baseline", "first_token_match", "identical_output", "kl_first_token"}) {
    CHECK_MESSAGE(second["modes"]["reuse"][k] == first["modes"]["reuse"][k], k);
    CHECK_MESSAGE(second["modes"]["full"][k] == first["modes"]["full"][k], k);
  }
  CHECK(second["modes"]["full"]["ttft_ms"] == first["modes"]["full"]["ttft_ms"]);  // the recorded timing
  // Another answer length is another baseline: computed and added.
  r = m.run(args + " --max-tokens 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["baseline_cache"]["taken"] == 0);
  REQUIRE(read_jsonl(cache).size() == 4);
  // A damaged entry (a writer killed mid-line) is never used: that baseline is computed again,
  // and the entry appended after the cut line still reads.
  {
    const std::string text = slurp(cache);
    const size_t last = text.rfind('\n', text.size() - 2) + 1;
    std::ofstream(cache, std::ios::trunc) << text.substr(0, last + (text.size() - last) / 2);
  }
  r = m.run(args + " --max-tokens 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["baseline_cache"]["taken"] == 1);
  CHECK(r.err.find("1 unreadable entries") != std::string::npos);
  r = m.run(args + " --max-tokens 3");
  CHECK(json::parse(r.out)["baseline_cache"]["taken"] == 2);
  // Another thread count is another engine (its TTFT): its baselines are computed, not taken.
  std::string one_thread = args + " --max-tokens 3";
  one_thread.replace(one_thread.find("--threads 2"), 11, "--threads 1");
  r = m.run(one_thread);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["baseline_cache"]["taken"] == 0);
  // So are other kernels of the same binary (RAGKV_PREFILL_KERNELS=f32: dequantised tiles, another
  // rounding), where this CPU has prompt kernels at all.
  {
    const ragkv::test::ScopedEnv f32("RAGKV_PREFILL_KERNELS", "f32");
    r = m.run(args + " --max-tokens 3");
  }
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const size_t taken_f32 = json::parse(r.out)["baseline_cache"]["taken"].get<size_t>();
  if (ragkv::prompt_kernels() != nullptr) CHECK(taken_f32 == 0);
  // Only full and prefix baselines are kept.
  r = m.run("eval " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes prefix --baseline reuse --limit 1 --max-tokens 3 --baseline-cache " + q(cache));
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--baseline-cache keeps full and prefix baselines") != std::string::npos);
}

TEST_CASE("cli rag: eval's MODE+freq answers over CRAFT's frequency order, exactly for prefix" * doctest::test_suite("real-model")) {
  MiniIndex m;
  Run r = m.run("precompute --threads 2 --neighbours 0 --index " + q(m.index) + " --store " + q(m.store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // The second query's chunks in frequency order: Normans (1 earlier use) and Super Bowl (1)
  // ahead of Tesla (none), ties in retrieval order.
  const fs::path queries = m.dir.path / "freq.jsonl";
  std::ofstream(queries) << R"({"id": "a", "question": "Who was the Super Bowl 50 MVP?", "answers": ["Von Miller"], "passages": ["Warsaw#0", "Super_Bowl_50#2", "Normans#5"]})" "\n"
                         << R"({"id": "b", "question": "What was the Norman religion?", "answers": ["Catholicism"], "passages": ["Nikola_Tesla#5", "Normans#5", "Super_Bowl_50#2"]})" "\n";
  const fs::path records = m.dir.path / "records.jsonl", js = m.dir.path / "report.json";
  r = m.run("eval " + q(queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
            " --modes full+freq,prefix+freq --max-tokens 4 --min-agreement 0 --max-kl -1 --answers " + q(records) +
            " --report " + q(js));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto rec = read_jsonl(records);
  REQUIRE(rec.size() == 2);
  CHECK_FALSE(rec[0]["modes"]["full+freq"].contains("chunks"));  // nothing counted yet: retrieval order
  CHECK(rec[1]["chunks"] == json{"Nikola_Tesla#5#0", "Normans#5#0", "Super_Bowl_50#2#0"});
  CHECK(rec[1]["modes"]["full+freq"]["chunks"] == json{"Normans#5#0", "Super_Bowl_50#2#0", "Nikola_Tesla#5#0"});
  CHECK(rec[1]["modes"]["prefix+freq"]["chunks"] == rec[1]["modes"]["full+freq"]["chunks"]);
  CHECK_FALSE(rec[1]["modes"]["full"].contains("chunks"));
  for (const json& x : rec)  // prefix reuses [prefix][chunk 1] exactly: the same tokens as full over that order
    CHECK(x["modes"]["prefix+freq"]["output_ids"] == x["modes"]["full+freq"]["output_ids"]);
  const json rep = json::parse(std::ifstream(js));
  CHECK(rep["modes"].contains("full+freq"));
  CHECK(rep["modes"]["prefix+freq"]["compute_fraction"].get<double>() < 1.0);
}

TEST_CASE("cli rag: bench cache replays exactly the hits and computed tokens of answer --mode prefix" * doctest::test_suite("real-model")) {
  MiniIndex m;
  // A store with no chunk caches (RAGCache's setting): its store.json from a one-chunk precompute.
  Run r = m.run("precompute --threads 2 --neighbours 0 --index " + q(m.index) + " --store " + q(m.store) + " --limit 1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const auto& f : fs::directory_iterator(m.store / "kv")) fs::remove(f.path());
  const fs::path cost = m.dir.path / "cost.json", summary = m.dir.path / "summary.json";
  const std::string common = " --threads 2 --index " + q(m.index) + " --top-k 3 --cost-profile " + q(cost);
  // A host budget that holds a few chunks, so that eviction decides hits.
  r = m.run("answer " + q(m.queries) + common + " --store " + q(m.store) +
            " --mode prefix+freq --max-tokens 1 --host-budget 24MiB --out " + q(m.dir.path / "a.jsonl") +
            " --summary " + q(summary));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json real = json::parse(std::ifstream(summary));
  r = m.run("bench cache " + q(m.queries) + common + " --host-budgets 24MiB,1GiB --policies pgdsf --orders reorder+freq,input");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json sim = json::parse(r.out);
  CHECK(sim["requests"] == 12);
  REQUIRE(sim["results"].size() == 4);
  const json& same = sim["results"][0];
  CHECK(same["order"] == "reorder+freq");
  CHECK(same["host_budget_bytes"] == 24u << 20);
  CHECK(same["hit_chunks"] == real["chunk_hits"]);
  CHECK(same["computed_tokens"] == real["computed_tokens"]);
  CHECK(same["prompt_tokens"] == real["prompt_tokens"]);
  CHECK(same["host_evicted"] == real["cache_manager"]["tiers"]["host"]["evicted"]);
  CHECK(same["craft_prefix_overlap"] == real["craft_prefix_overlap"]);
  CHECK(same["hit_chunks"].get<double>() > 0);
  for (const json& row : sim["results"]) {
    CHECK(row["host_peak_bytes"].get<uint64_t>() <= row["host_budget_bytes"].get<uint64_t>());
    CHECK(row["hit_rate"].get<double>() <= 1.0);
  }
}

TEST_CASE("cli rag: usage errors exit 2") {
  CHECK(run_ragkv("eval q.jsonl --index i --store s --modes blend,bogus").exit_code == 2);
  CHECK(run_ragkv("eval q.jsonl --index i --store s --modes blend/nonsense").exit_code == 2);
  CHECK(run_ragkv("eval q.jsonl --index i --store s --modes reuse/v").exit_code == 2);  // a method is blend's
  CHECK(run_ragkv("eval q.jsonl --index i --store s --modes blend@2").exit_code == 2);
  CHECK(run_ragkv("eval q.jsonl --index i --store s --select kv").exit_code == 2);  // the mode grammar says it: blend/kv
  CHECK(run_ragkv("answer q.jsonl --index i --mode nonsense").exit_code == 2);
  CHECK(run_ragkv("eval q.jsonl --index i").exit_code == 2);  // --store is required
}

TEST_CASE("cli rag: bad query lines and unknown passages fail naming file and line, or are skipped" * doctest::test_suite("real-model")) {
  MiniIndex m;
  auto in = read_jsonl(m.queries);
  in[1]["passages"] = json::array({"No_Such_Passage#0"});
  const fs::path bad = m.dir.write("bad.jsonl", in[0].dump() + "\n{not json\n" + in[1].dump() + "\n" + in[2].dump() + "\n");
  const std::string base = "answer " + q(bad) + " --threads 2 --index " + q(m.index) + " --max-tokens 3 --mode full";
  Run r = m.run(base);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("bad.jsonl:2:") != std::string::npos);
  r = m.run(base + " --on-error skip");
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("bad.jsonl:2:") != std::string::npos);
  CHECK(r.err.find("passage 'No_Such_Passage#0' is not in the index") != std::string::npos);
  int n = 0;
  for (char c : r.out) n += c == '\n';
  CHECK(n == 2);  // lines 1 and 4; line 2 is not JSON, line 3 names an unknown passage
  CHECK(r.err.find("\"skipped_lines\":1") != std::string::npos);
  CHECK(r.err.find("\"skipped_queries\":1") != std::string::npos);
}

TEST_CASE("cli rag: a precompute killed mid-way resumes without redoing finished chunks" * doctest::test_suite("check")) {
  MiniIndex m;
  const std::string cmd = ragkv::test::ragkv_in(m.dir.path) + " precompute --threads 1 --index " + q(m.index) +
                          " --store " + q(m.store) + " >/dev/null 2>&1";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill it (SIGKILL: no cleanup) once the prefix and two chunks are stored.
  auto stored = [&] {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(m.store / "kv", ec)) n += e.path().extension() == ".rkv";
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (stored() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  const size_t before = stored();
  REQUIRE(before >= 3);

  const Run r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(m.store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json j = json::parse(r.out);
  CHECK(j["skipped"].get<size_t>() >= before - 1);  // every finished chunk (the prefix is not counted)
  CHECK(j["computed"].get<size_t>() + j["skipped"].get<size_t>() == 6);
  CHECK(j["variants"]["computed"].get<size_t>() + j["variants"]["skipped"].get<size_t>() == 6);
  CHECK(j["store_files"] == 13);
  for (const auto& e : fs::directory_iterator(m.store / "kv")) CHECK(e.path().extension() == ".rkv");  // no temporaries
}

TEST_CASE("cli rag: conversations continue their turns in order, without repeating chunks (CRAFT dedup)" * doctest::test_suite("real-model")) {
  MiniIndex m;
  const fs::path conv = m.dir.path / "conv.jsonl";
  {
    std::ofstream f(conv);
    f << R"({"id": "c1-1", "conversation": "c1", "turn": 1, "question": "Where was Maria Curie born?", "passages": ["Warsaw#0", "Normans#5"]})" "\n"
      << R"({"id": "s1", "question": "Who was Martin Luther?", "passages": ["Martin_Luther#2"]})" "\n"
      << R"({"id": "c1-2", "conversation": "c1", "turn": 2, "question": "And Tesla?", "passages": ["Normans#5", "Nikola_Tesla#5"]})" "\n"
      << R"({"id": "c2-1", "conversation": "c2", "turn": 1, "question": "Who was Luther?", "passages": ["Martin_Luther#2"]})" "\n"
      << R"({"id": "c1-3", "conversation": "c1", "turn": 3, "question": "Which city again?", "passages": ["Warsaw#0"]})" "\n";
  }
  const std::string args = "answer " + q(conv) + " --threads 2 --index " + q(m.index) + " --mode full --max-tokens 4";
  const fs::path out = m.dir.path / "out.jsonl", one = m.dir.path / "one.jsonl", nodedup = m.dir.path / "nodedup.jsonl";
  const fs::path sum = m.dir.path / "sum.json";
  Run r = m.run(args + " --batch 4 --out " + q(out) + " --summary " + q(sum));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto a = read_jsonl(out);
  REQUIRE(a.size() == 5);
  const std::vector<std::string> ids{"c1-1", "s1", "c1-2", "c2-1", "c1-3"};
  for (size_t i = 0; i < 5; ++i) CHECK(a[i]["id"] == ids[i]);
  CHECK(a[0]["metrics"]["history_turns"] == 0);
  CHECK(a[2]["chunks"] == json::array({"Nikola_Tesla#5#0"}));  // Normans#5 is in the conversation already
  CHECK(a[2]["metrics"]["chunks_deduplicated"] == 1);
  CHECK(a[2]["metrics"]["history_turns"] == 1);
  CHECK(a[4]["chunks"] == json::array());
  CHECK(a[4]["metrics"]["history_turns"] == 2);
  CHECK(a[3]["metrics"]["history_turns"] == 0);  // another conversation
  CHECK_FALSE(a[1].contains("conversation"));
  CHECK(a[2]["conversation"] == "c1");
  CHECK(a[2]["turn"] == 2);
  // The later turn's prompt holds the earlier one: longer than its own chunk and question.
  CHECK(a[2]["metrics"]["prefill_tokens"].get<int>() > a[0]["metrics"]["prefill_tokens"].get<int>());
  const json s = json::parse(std::ifstream(sum));
  CHECK(s["conversations"] == 2);
  CHECK(s["chunks_deduplicated"] == 2.0);
  CHECK(s["reordered"] == false);

  // One at a time: the same answers. Without dedup: the repeated chunks are in the prompt again.
  r = m.run(args + " --batch 1 --out " + q(one));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto b = read_jsonl(one);
  REQUIRE(b.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(b[i]["answer"] == a[i]["answer"]);
  r = m.run(args + " --no-dedup --out " + q(nodedup));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto c = read_jsonl(nodedup);
  REQUIRE(c.size() == 5);
  CHECK(c[2]["chunks"] == json::array({"Normans#5#0", "Nikola_Tesla#5#0"}));
  CHECK(c[2]["metrics"]["chunks_deduplicated"] == 0);
  CHECK(c[4]["metrics"]["prefill_tokens"].get<int>() > a[4]["metrics"]["prefill_tokens"].get<int>());

  // Turns out of order: an error naming the file and line.
  const fs::path bad = m.dir.path / "bad.jsonl";
  {
    std::ofstream f(bad);
    f << R"({"id": "x2", "conversation": "x", "turn": 2, "question": "Q2?", "passages": ["Warsaw#0"]})" "\n"
      << R"({"id": "x1", "conversation": "x", "turn": 1, "question": "Q1?", "passages": ["Warsaw#0"]})" "\n";
  }
  r = m.run("answer " + q(bad) + " --threads 2 --index " + q(m.index) + " --mode full --max-tokens 2");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("bad.jsonl:2: query x1: turn 1 of conversation x follows turn 2") != std::string::npos);
}

TEST_CASE("cli rag: two precompute processes on one fresh store compute each chunk once, byte-identical to one" * doctest::test_suite("check")) {
  MiniIndex m;
  const fs::path single = m.dir.path / "single";
  const Run one = m.run("precompute --threads 1 --index " + q(m.index) + " --store " + q(single));
  REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  CHECK(json::parse(one.out)["computed"] == 6);

  // Two processes started together on a fresh store.
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    const std::string cmd = ragkv::test::ragkv_in(m.dir.path) + " precompute --threads 1 --index " + q(m.index) +
                            " --store " + q(m.store) + " >" + q(m.dir.path / fmt::format("out{}", i)) + " 2>" +
                            q(m.dir.path / fmt::format("err{}", i));
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  size_t computed = 0, variants = 0;
  for (int i = 0; i < 2; ++i) {
    int status = 0;
    waitpid(pids[size_t(i)], &status, 0);
    INFO(slurp(m.dir.path / fmt::format("err{}", i)));
    REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    const json j = json::parse(slurp(m.dir.path / fmt::format("out{}", i)));
    CHECK(j["computed"].get<size_t>() + j["skipped"].get<size_t>() + j["claimed_by_other"].get<size_t>() == 6);
    CHECK(j["taken_over"] == 0);
    computed += j["computed"].get<size_t>();
    const json& v = j["variants"];
    CHECK(v["computed"].get<size_t>() + v["skipped"].get<size_t>() + v["claimed_by_other"].get<size_t>() == 6);
    variants += v["computed"].get<size_t>();
  }
  CHECK(computed == 6);  // every chunk computed exactly once in total
  CHECK(variants == 6);

  // The same files, byte for byte, as the one process wrote; no claim or temporary left.
  std::map<std::string, std::string> a, b;
  for (const auto& e : fs::directory_iterator(single / "kv")) a[e.path().filename().string()] = slurp(e.path());
  for (const auto& e : fs::directory_iterator(m.store / "kv")) b[e.path().filename().string()] = slurp(e.path());
  CHECK(a.size() == 13);
  CHECK(a == b);
}

TEST_CASE("cli store: gc to a byte budget, variants first, canonical caches only when asked" * doctest::test_suite("real-model")) {
  MiniIndex m;
  Run r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(m.store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const uint64_t before = json::parse(r.out)["store_bytes"];

  r = m.run("store gc --store " + q(m.store) + " --max-bytes " + std::to_string(before - 1));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json j = json::parse(r.out);
  CHECK(j["bytes_before"] == before);
  CHECK(j["bytes_after"].get<uint64_t>() <= before - 1);
  CHECK(j["budget_met"] == true);
  REQUIRE(j["removed"].size() == 1);
  CHECK(j["removed"][0]["kind"] == "variant");

  // Below what the canonical caches hold: refused, nothing removed, the flag named.
  r = m.run("store gc --store " + q(m.store) + " --max-bytes 1000");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("--include-canonical") != std::string::npos);
  j = json::parse(r.out);
  CHECK(j["removed"].empty());
  CHECK(j["needs_canonical"] == true);
  CHECK(json::parse(m.run("store stats --store " + q(m.store)).out)["files"] == 12);

  r = m.run("store gc --store " + q(m.store) + " --max-bytes 1000 --include-canonical");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  j = json::parse(r.out);
  CHECK(j["bytes_after"].get<uint64_t>() <= 1000);
  CHECK(j["removed"].size() == 12);
  CHECK(j["removed"].back()["kind"] == "prefix");
  // The next precompute computes them again.
  r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(m.store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["computed"] == 6);
}

TEST_CASE("cli rag: precompute takes over the claims of dead processes, verify lists a stale claim, repair removes it" * doctest::test_suite("check")) {
  MiniIndex m;
  const fs::path single = m.dir.path / "single";
  Run r = m.run("precompute --threads 2 --neighbours 0 --index " + q(m.index) + " --store " + q(single));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // A claim on every file (the prefix's too) by a process killed mid-work on this machine.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  const std::string dead_claim = json{{"format", "ragkv-claim"}, {"host", host}, {"boot_id", boot_id}, {"pid", child},
                                      {"start_ticks", 0}, {"started_unix_ms", 0}, {"lease_s", 600}, {"token", "dead"}}
                                     .dump();
  fs::create_directories(m.store / "kv");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(single / "kv")) files.push_back(e.path());
  for (const fs::path& f : files) {
    std::ofstream(m.store / "kv" / (f.filename().string() + ".claim")) << dead_claim;
    std::ofstream(single / "kv" / (f.filename().string() + ".claim")) << dead_claim;
  }
  // Beside finished files (killed after writing, before releasing): a later run removes them, the
  // prefix's aside (every run computes the prefix; verify lists its claim, repair removes it).
  r = m.run("precompute --threads 2 --neighbours 0 --index " + q(m.index) + " --store " + q(single));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["skipped"] == 6);
  size_t claims_left = 0;
  for (const auto& e : fs::directory_iterator(single / "kv")) claims_left += e.path().extension() == ".claim";
  CHECK(claims_left == 1);
  r = m.run("store verify --store " + q(m.store));  // (no store.json yet)
  CHECK(r.exit_code == 1);
  r = m.run("precompute --threads 2 --neighbours 0 --index " + q(m.index) + " --store " + q(m.store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json j = json::parse(r.out);
  CHECK(j["computed"] == 6);
  CHECK(j["taken_over"] == 6);
  // The prefix is not claimed by precompute (every run computes it): its dead claim is left for
  // verify to list and repair to remove.
  r = m.run("store verify --store " + q(m.store));
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(json::parse(r.out)["stale_claims"].size() == 1);
  r = m.run("store repair --store " + q(m.store));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const auto& e : fs::directory_iterator(m.store / "kv")) CHECK(e.path().extension() == ".rkv");
  for (const auto& e : fs::directory_iterator(single / "kv"))
    if (e.path().extension() == ".rkv") CHECK(slurp(e.path()) == slurp(m.store / "kv" / e.path().filename()));
}

TEST_CASE("cli rag: pipelined retrieval with speculative loads answers exactly as retrieval first" * doctest::test_suite("real-model")) {
  MiniIndex m;
  Run r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(m.store) + " --neighbours 0");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // The questions without their pinned passages: every query is embedded and searched.
  const fs::path searched = m.dir.path / "searched.jsonl";
  {
    std::ofstream f(searched);
    for (json j : read_jsonl(m.queries)) {
      j.erase("passages");
      f << j.dump() << "\n";
    }
  }
  const std::string base = "answer " + q(searched) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
                           " --limit 6 --top-k 3 --max-tokens 3 --mode prefix --host-budget 64MiB";
  auto run = [&](const std::string& name, const std::string& flags) {
    const fs::path out = m.dir.path / (name + ".jsonl"), sum = m.dir.path / (name + ".json");
    const Run rr = m.run(base + " " + flags + " --out " + q(out) + " --summary " + q(sum));
    REQUIRE_MESSAGE(rr.exit_code == 0, rr.err);
    return std::make_pair(read_jsonl(out), json::parse(std::ifstream(sum)));
  };
  auto same = [](const std::vector<json>& a, const std::vector<json>& b) {
    REQUIRE(a.size() == 6);
    REQUIRE(b.size() == a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i]["id"] == b[i]["id"]);
      CHECK(a[i]["answer"] == b[i]["answer"]);
      CHECK(a[i]["chunks"] == b[i]["chunks"]);  // speculation never changes the chunks used
      for (const char* k : {"exact_path_chunks", "cache_hits", "computed_tokens", "reused_tokens"})
        CHECK_MESSAGE(a[i]["metrics"][k] == b[i]["metrics"][k], k);
    }
  };
  // Reordered (the file is shorter than --reorder-window, so one block: the same order) and in
  // input order with two answers in flight: pipelined and speculating, or retrieval first.
  const auto [pa, ps] = run("pipelined", "--pipeline --search-slice 4");
  const auto [fa, fs_] = run("first", "");
  same(pa, fa);
  CHECK(ps["order_runs"] == fs_["order_runs"]);
  const auto [pn, pns] = run("pipelined-in-order", "--pipeline --no-reorder --batch 2");
  const auto [fn, fns] = run("first-in-order", "--no-reorder --batch 2");
  same(pn, fn);
  for (const json* s : {&ps, &pns}) {
    const json& sr = (*s)["search"];
    CHECK(sr["pipelined"] == true);
    CHECK(sr["speculative"] == true);
    CHECK(sr["queries_searched"] == 6);
    CHECK(sr["retrieve_phase_ms"] == 0.0);
    const json& sp = sr["speculation"];
    CHECK(sp["speculations"].get<int>() >= 6);           // at least the final top-k of each query
    CHECK(sp["tree_paths_started"].get<int>() >= 6 * 3);  // its three tree paths
    CHECK(sp["loads_wanted"].get<int>() > 0);
    CHECK(sp["bytes_read"].get<double>() > 0);  // the stored caches were read ahead
    CHECK(sp["tree_paths_wasted"].get<int>() <= sp["tree_paths_started"].get<int>());
  }
  for (const json* s : {&fs_, &fns}) {
    const json& sr = (*s)["search"];
    CHECK(sr["pipelined"] == false);
    CHECK(sr["speculative"] == false);
    CHECK(sr["unhidden_search_ms"] == sr["retrieve_phase_ms"]);  // every search before the first answer
    CHECK(sr["search_ms"].get<double>() > 0);
  }
  for (const json& line : pa) CHECK(line["metrics"].contains("retrieval_wait_ms"));
}

TEST_CASE("cli rag: answer --load-control reports each segment's decision, and on a CPU loads them all" * doctest::test_suite("real-model")) {
  MiniIndex m;
  Run r = m.run("precompute --threads 2 --index " + q(m.index) + " --store " + q(m.store) + " --neighbours 0");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const fs::path profile = m.dir.path / "profile.json";
  const std::string base = "answer " + q(m.queries) + " --threads 2 --index " + q(m.index) + " --store " + q(m.store) +
                           " --limit 3 --max-tokens 3 --mode blend";
  auto run = [&](const std::string& name, const std::string& flags) {
    const fs::path out = m.dir.path / (name + ".jsonl"), sum = m.dir.path / (name + ".json");
    const Run rr = m.run(base + " " + flags + " --out " + q(out) + " --summary " + q(sum));
    REQUIRE_MESSAGE(rr.exit_code == 0, rr.err);
    return std::make_tuple(read_jsonl(out), json::parse(std::ifstream(sum)), rr.err);
  };
  const auto [ra, rs, rerr] = run("report", "--load-control report --cost-profile " + q(profile));
  CHECK(rerr.find("machine profile measured into") != std::string::npos);
  const json prof = json::parse(std::ifstream(profile));
  CHECK(prof["tiers"]["disk_cold_mb_s"].get<double>() > 0);
  CHECK(prof["profile"].contains("ms"));
  REQUIRE(ra.size() == 3);
  for (const json& line : ra) {
    const json& lc = line["metrics"]["load_control"];
    CHECK(lc["applied"] == false);
    CHECK(lc["pipelined"] == true);
    REQUIRE(lc["segments"].size() >= 2);  // the prefix and the chunks
    for (const json& s : lc["segments"]) {
      CHECK((s["tier"] == "disk" || s["tier"] == "host"));  // the managed host tier keeps what a prompt used
      CHECK(s["load_ms"].get<double>() > 0);
      CHECK(s["compute_ms"].get<double>() > 0);
    }
    CHECK(lc["preload_depth"].get<int>() >= 1);
  }
  CHECK(rs["load_control"]["prompts"] == 3);
  // On: this CPU computes a chunk far slower than it reads one, so every cache is loaded and the
  // answers are report's (and the profile is read, not measured again).
  const auto [oa, os, oerr] = run("on", "--load-control on --cost-profile " + q(profile));
  CHECK(oerr.find("machine profile measured") == std::string::npos);
  CHECK(os["load_control"]["recomputed_segments"] == 0);
  REQUIRE(oa.size() == 3);
  for (size_t i = 0; i < oa.size(); ++i) {
    CHECK(oa[i]["metrics"]["load_control"]["applied"] == true);
    CHECK(oa[i]["metrics"]["load_control"]["loader_depth"].get<int>() >= 2);
    CHECK(oa[i]["answer"] == ra[i]["answer"]);
  }
  // Off: no controller, no metrics of it.
  const auto [fa, fs_, ferr] = run("off", "");
  CHECK(fs_["load_control"].is_null());
  CHECK_FALSE(fa[0]["metrics"].contains("load_control"));
}

TEST_CASE("cli rag: answer on a store it cannot write keeps its answers and warns that variant uses went unrecorded" * doctest::test_suite("check")) {
  // A tiny random model (the pipeline, not its answers, is under test): index, canonical caches
  // and a warm-up variant of the first query's last passage computed after its first passage
  // alone, so that auto reuses it (β = 1, γ = 0: CFO 0) and records the use.
  TempDir dir("cli-rag-readonly");
  const fs::path tiny = dir.path / "tiny.gguf", index = dir.path / "index", store = dir.path / "store";
  const fs::path queries = ragkv::test::testdata("rag-mini.queries.jsonl"), warmup = dir.path / "warmup.jsonl";
  REQUIRE(read_jsonl(queries)[0]["passages"] == json::array({"Warsaw#0", "Super_Bowl_50#2", "Normans#5"}));
  std::ofstream(warmup) << R"({"id": "w", "question": "Who?", "passages": ["Warsaw#0", "Normans#5"]})" "\n";
  Run r = run_ragkv("make-test-model --arch llama --layers 2 --embd 64 --heads 2 --kv-heads 1 --ff 128 --context 8192 --out " +
                    q(tiny));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string model = " --threads 2 --model " + q(tiny);
  r = run_ragkv("build-index --corpus " + q(ragkv::test::testdata("rag-mini.corpus.jsonl")) + " --out " + q(index) +
                " --chunk-tokens 2048" + model);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_ragkv("precompute --index " + q(index) + " --store " + q(store) + " --queries " + q(queries) + " --warmup " +
                q(warmup) + model);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  REQUIRE(json::parse(r.out)["variants"]["computed"].get<size_t>() > 0);

  const std::string answer = "answer " + q(queries) + " --index " + q(index) + " --store " + q(store) +
                             " --limit 3 --max-tokens 2" + model + " --out ";
  const fs::path first = dir.path / "first.jsonl", second = dir.path / "second.jsonl";
  r = run_ragkv(answer + q(first));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  size_t variant_chunks = 0;
  for (const json& a : read_jsonl(first)) variant_chunks += a["metrics"]["craft"]["variant_chunks"].get<size_t>();
  REQUIRE(variant_chunks > 0);
  CHECK(fs::exists(store / "variant-usage.json"));  // a writable store records the uses
  CHECK(r.err.find("not recorded") == std::string::npos);

  // The lock file cannot be opened for writing (as on a read-only mount, which a test cannot make
  // without privileges): the same answers, exit 0, one warning naming the file.
  const std::string usage = slurp(store / "variant-usage.json");
  fs::remove(store / "variants.lock");
  fs::create_directory(store / "variants.lock");
  r = run_ragkv(answer + q(second));
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("ragkv: warning: variant uses (f_r) not recorded in the store: ") != std::string::npos);
  CHECK(r.err.find("variants.lock") != std::string::npos);
  const auto a = read_jsonl(first), b = read_jsonl(second);
  REQUIRE(b.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(b[i]["answer"] == a[i]["answer"]);
    CHECK(b[i]["metrics"]["craft"]["variant_chunks"] == a[i]["metrics"]["craft"]["variant_chunks"]);
  }
  CHECK(slurp(store / "variant-usage.json") == usage);  // untouched
}
