// precompute, answer and eval: their flags, turned into the options of core/rag's answer run and
// core/eval's eval run, and the runs' results turned into output.

#include <fmt/format.h>

#include <cstdio>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cmd/cache-flags.h"
#include "cmd/command-family.h"
#include "cmd/device-flags.h"
#include "cmd/mode-validator.h"
#include "core/eval/answer-scoring.h"
#include "core/eval/eval-run.h"
#include "core/kv/claim-set.h"
#include "core/kv/variant-ledger.h"
#include "core/model/embedder.h"
#include "core/model/model.h"
#include "core/rag/answer-run.h"
#include "core/rag/cache-keys.h"
#include "core/rag/mode-spec.h"
#include "core/rag/precompute-selection.h"
#include "core/rag/precompute.h"
#include "core/rag/queries.h"
#include "core/rag/rag-engine.h"
#include "core/rag/selection.h"
#include "core/rag/variant-compute.h"
#include "retrieval/index-dir.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/line-writer.h"
#include "core/util/paths.h"
#include "core/util/progress.h"

namespace ragkv::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct RagFlags {  // shared by answer and eval
  std::string queries, index, store, model, embedder, on_error = "fail";
  size_t top_k = 5, limit = 0;
  ModeDefaults defaults;
  size_t batch = 8;
  DeviceFlags dev;

  QueryFile load() const;
  RagEngineOptions engine(bool need_store) const {
    return {index, store, model, embedder, top_k, need_store, std::nullopt, "off", ""};
  }
};

class RagCommands : public CommandFamily {
 public:
  void add_to(CLI::App& app) override;
  bool selected() const override;
  int run() override;

 private:
  CLI::App *precompute_ = nullptr, *answer_ = nullptr, *eval_ = nullptr;
  // precompute
  std::string pc_index, pc_store, pc_model, pc_queries, pc_embedder, pc_warmup;
  size_t pc_limit = 0, pc_top_k = 5, pc_neighbours = 2;
  std::optional<size_t> pc_max_variants;
  std::optional<uint64_t> pc_variant_bytes;
  double pc_claim_lease = kDefaultClaimLeaseSeconds;
  std::optional<int> pc_kv_bits;
  DeviceFlags pc_dev;
  // answer
  RagFlags an;
  CacheFlags an_cache;
  std::string an_mode, an_out, an_compare, an_summary;
  bool an_write_back = false, an_no_reorder = false, an_no_dedup = false, an_pipeline = false;
  size_t an_reorder_window = 64, an_ca_window = kDefaultCaWindow, an_search_slice = 32;
  int64_t an_promotion_threshold = 1;
  std::string an_chunk_order = "retrieval";
  // eval
  RagFlags ev;
  std::string ev_modes = "blend", ev_baseline = "full", ev_report, ev_answers, ev_junit, ev_baseline_cache;
  std::vector<double> ev_sweep;
  GateThresholds ev_gate;
  bool ev_resume = false;
  bool ev_fit_alpha = false;

  int run_precompute();
  int run_answer();
  int run_eval();
};

// Comma-separated reuse modes, checked while parsing (a bad one is a usage error, exit 2).
std::vector<std::string> split_modes(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string m; std::getline(ss, m, ',');)
    if (!m.empty()) out.push_back(m);
  return out;
}
CLI::Validator modes_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const auto modes = split_modes(s);
        if (modes.empty()) return "no mode given";
        for (const auto& m : modes) {
          try {
            parse_mode_spec(m);
          } catch (const Error& e) {
            return e.what();
          }
        }
        return "";
      },
      "MODE[/METHOD][@R][,...]");
}
// The query file, cut to --limit; its skipped lines reported.
QueryFile RagFlags::load() const {
  QueryFile qf = load_queries(queries, parse_on_error(on_error));
  for (const auto& p : qf.skipped) std::fprintf(stderr, "ragkv: skipped %s\n", p.message.c_str());
  if (limit > 0 && qf.queries.size() > limit) qf.queries.resize(limit);
  return qf;
}

void add_rag_flags(CLI::App* c, RagFlags& f) {
  f.model = default_llm_path();
  f.embedder = default_embedder_dir();
  c->add_option("QUERIES", f.queries, "Queries JSONL {id,question,answers?,passages?}")->required();
  c->add_option("--index", f.index, "Index directory (build-index)")->required();
  c->add_option("--model", f.model, "LLM in GGUF format")->capture_default_str();
  c->add_option("--embedder", f.embedder, "Sentence-embedder directory (for queries without passages)")->capture_default_str();
  c->add_option("--top-k", f.top_k, "Chunks retrieved per question (queries with \"passages\" use those)")->check(CLI::Range(1, 1000))->capture_default_str();
  c->add_option("--recompute-ratio", f.defaults.recompute_ratio, "blend: fraction of reused tokens recomputed per layer")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  c->add_option("--check-layers", f.defaults.check_layers, "blend: layers 1..N select HKVD tokens by gradual filtering (1: one check layer)")->check(CLI::Range(1, 1024))->capture_default_str();
  c->add_option("--check-at", f.defaults.check_at, "blend: explicit check layers, ascending, comma-separated (instead of 1..N)")->delimiter(',')->check(CLI::Range(1, 1 << 16));
  c->add_option("--select", f.defaults.select, "blend: how tokens to recompute are chosen (auto: the default of the model's architecture)")->check(CLI::IsMember(selection_choices()))->capture_default_str();
  c->add_option("--adaptive", f.defaults.adaptive, "blend: per query, recompute the fewest tokens holding this share of the selection's score mass, within [1/2, 2] x r (0: a fixed r)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  c->add_option("--sink-tokens", f.defaults.sink_tokens, "blend sink methods: first tokens per chunk recomputed (0: ceil(r x chunk) for sink, 4 with +v)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  c->add_option("--alpha", f.defaults.alpha, fmt::format("craft, auto: alpha of the Cache Fix Overhead, CFO = alpha x CCI x (1 - beta') (Cache-Craft Eq. 12); default: the store's fitted alpha (eval --fit-alpha), else {}", kDefaultAlpha))->check(CLI::Range(0.0, 10.0));
  c->add_option("--focus-window", f.defaults.focus_window, "craft: layers the question's focused chunks must hold before the others stop being recomputed (Cache-Craft Algorithm 1's w; 0: never stop)")->check(CLI::Range(0, 1024))->capture_default_str();
  c->add_option("--max-tokens", f.defaults.max_tokens, "Maximum answer tokens")->check(CLI::Range(1, 4096))->capture_default_str();
  c->add_option("--batch", f.batch, "Answers decoded together: up to N prompts in flight, each prefilled on admission, all decoded in one step per token (continuous batching; answers equal --batch 1's)")->check(CLI::Range(size_t(1), size_t(256)))->capture_default_str();
  c->add_option("--limit", f.limit, "Answer only the first N queries (0: all)")->check(CLI::NonNegativeNumber);
  c->add_option("--on-error", f.on_error, "Bad query lines and unanswerable queries: fail, or skip and count")->check(CLI::IsMember(on_error_names()))->capture_default_str();
  f.dev.add_to(c);
}

void RagCommands::add_to(CLI::App& app) {
  precompute_ = app.add_subcommand("precompute", "Compute the KV caches of an index's chunks into a store (STORE_DIR)");
  pc_model = default_llm_path();
  pc_embedder = default_embedder_dir();
  precompute_->add_option("--index", pc_index, "Index directory (build-index)")->required();
  precompute_->add_option("--store", pc_store, "Store directory to fill (created if missing)")->required();
  precompute_->add_option("--model", pc_model, "LLM in GGUF format")->capture_default_str();
  precompute_->add_option("--limit", pc_limit, "Only the first N selected chunks (0: all)")->check(CLI::NonNegativeNumber);
  precompute_->add_option("--queries", pc_queries, "Only the chunks these queries use (their passages, or their top-k)");
  precompute_->add_option("--top-k", pc_top_k, "With --queries: chunks retrieved per question")->check(CLI::Range(1, 1000))->capture_default_str();
  precompute_->add_option("--embedder", pc_embedder, "Sentence-embedder directory (with --queries or --warmup)")->capture_default_str();
  precompute_->add_option("--warmup", pc_warmup, "Cache-Craft variants: replay these queries as answer would retrieve them and store each chunk as computed after the chunks before it");
  precompute_->add_option("--neighbours", pc_neighbours, "Cache-Craft variants without --warmup: each chunk computed after its N most similar chunks in the index (0: canonical caches only)")->check(CLI::Range(0, 16))->capture_default_str();
  precompute_->add_option("--max-variants", pc_max_variants, "Cache-Craft budget: at most N variant files in the store (0: no limit); kept in STORE/craft.json for later runs, lowest f_r evicted first")->check(CLI::NonNegativeNumber);
  precompute_->add_option("--variant-bytes", pc_variant_bytes, "Cache-Craft budget: at most this many bytes of variant files (0: no limit); kept in STORE/craft.json")->check(CLI::NonNegativeNumber);
  precompute_->add_option("--claim-lease", pc_claim_lease, "Seconds after which another process may take over this run's claim on a chunk if this run stops refreshing it (processes sharing a store claim chunks so each is computed once; the claim's mtime is refreshed every lease/4)")->check(CLI::Range(0.1, 86400.0))->capture_default_str();
  precompute_->add_option("--kv-bits", pc_kv_bits, "KV encoding of a new store's chunk caches: 16 (f16, as computed), 8 or 4 (KIVI groups: K per channel over 32 tokens, V per token over 32 channels; decoded to f16 while loading). Default: the store's own, 16 for a new store; another value than an existing store's is an error")->check(CLI::IsMember({16, 8, 4}));
  pc_dev.add_to(precompute_);

  answer_ = app.add_subcommand("answer", "Answer a query file with retrieval and chunk-KV reuse (ANSWERS.jsonl)");
  add_rag_flags(answer_, an);
  answer_->add_option("--store", an.store, "Chunk-cache store (precompute); without it every mode computes in full");
  answer_->add_option("--mode", an_mode, "full, prefix, reuse, blend[/METHOD][@R], craft[/ABLATION][@ALPHA] or auto (default: auto with --store, else full); MODE+freq is --chunk-order freq")
      ->check(mode_validator());
  answer_->add_option("--out", an_out, "ANSWERS.jsonl to write (default: stdout)");
  answer_->add_option("--compare", an_compare, "Also answer in this mode and score against it (e.g. full)")
      ->check(mode_validator());
  answer_->add_option("--summary", an_summary, "Write the per-mode summary JSON here too");
  an_cache.add_to(answer_);
  answer_->add_flag("--no-reorder", an_no_reorder, "Answer in input order (default: retrieve every query first, then answer queries sharing chunk prefixes together, best-cached first; RAGCache §5.2)");
  answer_->add_option("--chunk-order", an_chunk_order, "Order of a query's chunks in its prompt: retrieval (by score), or freq (CRAFT: most accessed in the CA-Table's window first, so shared chunks align as prefixes; order can change answers)")->check(CLI::IsMember({"retrieval", "freq"}))->capture_default_str();
  answer_->add_option("--promotion-threshold", an_promotion_threshold, "CRAFT's CP-Tree: a computed chunk prefix enters the knowledge tree once every chunk of it was retrieved this many times in the CA-Table's window (1: at once, as RAGCache; CRAFT's default 2)")->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
  answer_->add_option("--ca-window", an_ca_window, "CRAFT's CA-Table: requests in its sliding window of chunk access counts")->check(CLI::Range(size_t(1), size_t(1) << 40))->capture_default_str();
  answer_->add_option("--reorder-window", an_reorder_window, "Reordering: queries (of the grouped order) among which the best-cached is answered next (0: the whole file)")->check(CLI::NonNegativeNumber)->capture_default_str();
  answer_->add_flag("--pipeline", an_pipeline, "Retrieve in a worker thread ahead of the answering loop, which starts once the first query (with reordering, the first --reorder-window block) is retrieved, and load caches speculatively from staged-search snapshots (RAGCache §5.3). Off by default: on a CPU the embedder takes turns with the LLM on the same cores, and it was measured slower there (bench/results, 2026-11-25); default: retrieve every query first")->capture_default_str();
  answer_->add_option("--search-slice", an_search_slice, "With --pipeline: run each search in stages of N distance computations and, whenever a stage's top-k changes, start loading those chunks' caches, keeping the longest common chunk prefix with the previous stage's (RAGCache §5.3 speculative pipelining; 0: no speculation)")->check(CLI::NonNegativeNumber)->capture_default_str();
  answer_->add_flag("--no-dedup", an_no_dedup, "Conversations: repeat a chunk a later turn retrieves again (default: CRAFT's conversation-scoped deduplication drops chunks already in the conversation)");
  answer_->add_flag("--write-back", an_write_back, "Store each chunk a prompt computes (it had no cache) as the Cache-Craft variant of the chunks before it, within the store's variant budget (reuse, blend, craft, auto)");

  eval_ = app.add_subcommand("eval", "Quality gate: each mode against a baseline on the same chunks");
  add_rag_flags(eval_, ev);
  eval_->add_option("--store", ev.store, "Chunk-cache store (precompute)")->required();
  eval_->add_option("--modes", ev_modes, "Modes to evaluate, comma-separated: full, prefix, reuse, blend[/METHOD][@R], craft[/ABLATION][@ALPHA], auto; MODE+freq puts each prompt's chunks in CRAFT's frequency order (e.g. full+freq against the full baseline measures what the order costs); reuse is added as the reference of recovery")->check(modes_validator())->capture_default_str();
  eval_->add_option("--baseline", ev_baseline, "Baseline mode")->check(mode_validator())->capture_default_str();
  eval_->add_option("--sweep", ev_sweep, "Recompute ratios: every blend mode without @R is run at each (e.g. 0,0.05,0.1,0.15,0.2,0.3,0.5), every craft mode without @ALPHA at each as alpha")->delimiter(',')->check(CLI::Range(0.0, 1.0));
  eval_->add_option("--min-agreement", ev_gate.min_agreement, "Gate: first-token agreement with the baseline, lower 95 % bound, at least this (0: off)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  eval_->add_option("--max-kl", ev_gate.max_kl, "Gate: first-token KL to the baseline, upper 95 % bound, at most this (negative: off)")->capture_default_str();
  eval_->add_option("--min-recovery", ev_gate.min_recovery, "Gate: recovery of reuse's first-token KL and agreement damage, lower 95 % bound, at least this (negative: off)")->capture_default_str();
  eval_->add_option("--min-quality-ratio", ev_gate.min_quality_ratio, "Gate: gold-F1 ratio to the baseline at least this (0: off; information otherwise)")->check(CLI::Range(0.0, 10.0))->capture_default_str();
  eval_->add_option("--junit", ev_junit, "Write the gate's checks as JUnit XML here (one test case per mode and threshold)");
  eval_->add_option("--report", ev_report, "Report file: Markdown when it ends in .md, else JSON");
  eval_->add_option("--answers", ev_answers, "Write every mode's answers per query here (JSONL)");
  eval_->add_flag("--fit-alpha", ev_fit_alpha, "Cache-Craft Eq. 13: of the craft modes evaluated at several alphas (craft with --sweep, or craft@A,...), store the smallest alpha that passes the gate in STORE/craft.json (the default alpha of answer and eval on that store); exit 0 when one passed, 1 when none did");
  eval_->add_option("--baseline-cache", ev_baseline_cache, "Keep the baseline's answers (and first-step logits) in this JSONL file and take them from it when this binary, model, baseline, --max-tokens and prompt are the same: later runs compute only the modes");
  eval_->add_flag("--resume", ev_resume, "Keep the queries already answered in --answers (a finished or interrupted run) and answer the rest");
}

bool RagCommands::selected() const { return *precompute_ || *answer_ || *eval_; }

int RagCommands::run() {
  if (*precompute_) return run_precompute();
  if (*answer_) return run_answer();
  return run_eval();
}

// precompute's one-line JSON report: what was computed, skipped and claimed, and the store after.
json precompute_summary(const KvStore& store, const std::string& path, const Model& model, const CacheKeys& keys,
                        size_t selected, const PrecomputeStats& st, const VariantComputeStats& vs, const char* source) {
  const auto [files, bytes] = store.usage();
  const ModelConfig& c = model.config();
  const KvEncoding encoding = store.info().encoding();
  // K and V of every layer, per token of a long chunk (group scales included)
  const double bytes_per_token = kv_bytes_per_token(encoding, uint32_t(c.n_layer), uint32_t(c.kv_dim()));
  return json{{"store", path}, {"model", keys.model_fingerprint()}, {"chunks_selected", selected},
              {"computed", st.computed}, {"skipped", st.skipped}, {"claimed_by_other", st.claimed_by_other},
              {"taken_over", st.taken_over}, {"tokens", st.tokens},
              {"seconds", st.seconds}, {"tokens_per_s", st.seconds > 0 ? double(st.tokens) / st.seconds : 0.0},
              {"bytes_written", st.bytes_written + vs.bytes_written}, {"kv_bytes_per_token", bytes_per_token},
              {"kv_dtype", encoding.name()},
              {"variants", {{"source", source}, {"computed", vs.computed}, {"skipped", vs.skipped},
                            {"claimed_by_other", vs.claimed_by_other}, {"taken_over", vs.taken_over}, {"tokens", vs.tokens},
                            {"over_budget", vs.over_budget}, {"evicted", vs.evicted}, {"seconds", vs.seconds}}},
              {"store_files", files}, {"store_bytes", bytes}};
}

int RagCommands::run_precompute() {
  auto backend = pc_dev.make_backend();
  std::optional<QueryFile> qf, warmup;
  if (!pc_queries.empty()) qf = load_queries(pc_queries, OnError::fail);
  if (!pc_warmup.empty()) warmup = load_queries(pc_warmup, OnError::fail);
  auto searches = [](const std::optional<QueryFile>& f) {
    return f && std::any_of(f->queries.begin(), f->queries.end(), [](const Query& q) { return q.passages.empty(); });
  };
  std::unique_ptr<Embedder> embedder;
  if (searches(qf) || searches(warmup)) {
    embedder = std::make_unique<Embedder>();
    embedder->load(pc_embedder, *backend);
  }
  const IndexDir index = IndexDir::open(pc_index, embedder ? embedder->fingerprint() : "");
  Model model(pc_model, *backend);
  warn_if_other_tokenizer(index, model);
  const PromptFormat format(model);
  const CacheKeys keys(model, format);
  KvStoreInfo store_info = keys.store_info();
  store_info.dtype = pc_kv_bits ? KvEncoding::from_bits(*pc_kv_bits).name() : "";  // "": the store's, else f16
  const KvStore store = KvStore::open_for_write(pc_store, store_info);
  if (pc_max_variants || pc_variant_bytes) {
    CraftStoreSettings cs = read_craft_settings(store);
    if (pc_max_variants) cs.budget.max_variants = *pc_max_variants;
    if (pc_variant_bytes) cs.budget.max_bytes = *pc_variant_bytes;
    write_craft_settings(store, cs);
  }

  // Selection: every chunk, or those the queries use (first use order), then --limit.
  const ContextRetriever retriever(index, embedder.get(), pc_top_k);
  std::vector<const Chunk*> chunks;
  if (qf)
    chunks = chunks_used_by(retriever, qf->queries);
  else
    for (const Chunk& c : index.chunks()) chunks.push_back(&c);
  if (pc_limit > 0 && chunks.size() > pc_limit) chunks.resize(pc_limit);

  // Other processes sharing the store skip what this one claims, and the other way round.
  ClaimSet claims(pc_claim_lease);
  std::optional<Progress> bar;  // made once the chunks left to compute are known
  const PrecomputeStats st = precompute_chunks(model, format, store, chunks, [&](size_t done, size_t total) {
    if (!bar) {
      if (chunks.size() > total)
        std::fprintf(stderr, "precompute: %zu of %zu chunks already stored\n", chunks.size() - total, chunks.size());
      bar.emplace("precompute", int64_t(total), "chunks");
    }
    bar->set(int64_t(done));
  }, &claims);
  if (bar) bar->finish();

  // Cache-Craft variants (DESIGN.md §4): the warm-up queries' prompts, or each selected chunk
  // after its nearest neighbours in the index.
  const auto sequences = warmup ? warmup_sequences(retriever, warmup->queries) : neighbour_sequences(index, chunks, pc_neighbours);
  std::optional<Progress> vbar;
  VariantLedger ledger(store);
  const VariantComputeStats vs = precompute_variants(model, format, store, sequences, !warmup, &ledger, [&](size_t done, size_t total) {
    if (!vbar) vbar.emplace(warmup ? "precompute: warm-up variants" : "precompute: neighbour variants", int64_t(total), "variants");
    vbar->set(int64_t(done));
  }, &claims);
  if (vbar) vbar->finish();
  std::cout << precompute_summary(store, pc_store, model, keys, chunks.size(), st, vs, warmup ? "warmup" : sequences.empty() ? "none" : "neighbours").dump() << "\n";
  return 0;
}

int RagCommands::run_answer() {
  const QueryFile qf = an.load();
  auto backend = an.dev.make_backend();
  RagEngineOptions eo = an.engine(false);
  eo.tiers = an_cache.config(*backend);
  eo.load_control = an_cache.load_control;
  eo.cost_profile = an_cache.cost_profile;
  RagEngine engine(eo, qf.queries, *backend);
  AnswerRunOptions o;
  o.mode = !an_mode.empty() ? parse_mode_spec(an_mode) : ModeSpec(engine.has_store() ? ReuseMode::auto_ : ReuseMode::full);
  if (an_cache.load_control != "off" && !engine.load_controller())
    std::fprintf(stderr, "ragkv: answer: --load-control %s: no store of this model, nothing is loaded\n",
                 an_cache.load_control.c_str());
  if (!an_compare.empty()) {
    o.compare = parse_mode_spec(an_compare);
    if (o.compare->freq_order) fail("--compare {}: the comparison answers over the same chunks, in the same order; drop '+freq'", an_compare);
  }
  o.defaults = an.defaults;
  o.on_error = parse_on_error(an.on_error);
  o.batch = an.batch;
  o.write_back = an_write_back;
  o.reorder = !an_no_reorder;
  o.reorder_window = an_reorder_window;
  o.dedup = !an_no_dedup;
  o.freq_order = an_chunk_order == "freq" || o.mode.freq_order;  // MODE+freq is --chunk-order freq
  o.ca_window = an_ca_window;
  o.promotion_threshold = an_promotion_threshold;
  o.pipeline = an_pipeline;
  o.search_slice = an_search_slice;
  o.apply_load_control = an_cache.load_control == "on";
  o.raise_ratio = an_cache.raise_ratio;
  LineWriter out(an_out);
  AnswerScoring scoring;
  AnswerRunResult r = run_answers(engine, qf, o, [&](AnsweredQuery& a) { scoring.score(a); },
                                  [&](const std::string& line) { out.line(line); });
  out.close();
  r.summary.update(scoring.summary());
  std::fprintf(stderr, "ragkv: answer summary: %s\n", r.summary.dump().c_str());
  if (!an_summary.empty()) write_file_atomic(an_summary, {r.summary.dump(2) + "\n"});
  if (r.bad_reads > 0)  // never silent: name the store and the command that rewrites the bad files
    std::fprintf(stderr,
                 "ragkv: warning: %s: %.0f chunk-cache reads failed their checks and were recomputed; `ragkv store repair "
                 "--store %s --index %s` (or the next precompute) rewrites the bad files\n",
                 an.store.c_str(), r.bad_reads, an.store.c_str(), an.index.c_str());
  if (r.answered == 0 && r.skipped > 0)
    fail("{}: every query was skipped ({} of {}, and {} bad lines): nothing was answered", an.queries, r.skipped,
         qf.queries.size(), qf.skipped.size());
  return 0;
}

int RagCommands::run_eval() {
  if (ev_resume && ev_answers.empty()) fail("--resume needs --answers FILE (the records to resume from)");
  const QueryFile qf = ev.load();
  auto backend = ev.dev.make_backend();
  RagEngine engine(ev.engine(true), qf.queries, *backend);
  EvalRunOptions o;
  o.modes = split_modes(ev_modes);
  o.baseline = ev_baseline;
  o.sweep = ev_sweep;
  o.defaults = ev.defaults;
  o.top_k = ev.top_k;
  o.gate = ev_gate;
  o.on_error = parse_on_error(ev.on_error);
  o.batch = ev.batch;
  o.answers = ev_answers;
  o.resume = ev_resume;
  o.baseline_cache = ev_baseline_cache;
  o.report = ev_report;
  o.junit = ev_junit;
  o.fit_alpha = ev_fit_alpha;
  o.queries_path = ev.queries;
  o.store_path = ev.store;
  const EvalRunResult r = ragkv::run_eval(engine, qf, o);
  if (r.exit_code == 2) return 2;
  std::cout << r.summary.dump(2) << "\n";
  for (const std::string& line : gate_verdict_lines(r.checks)) std::fprintf(stderr, "ragkv: eval gate: %s\n", line.c_str());
  return r.exit_code;
}

}  // namespace

std::unique_ptr<CommandFamily> rag_commands() { return std::make_unique<RagCommands>(); }

}  // namespace ragkv::cli
