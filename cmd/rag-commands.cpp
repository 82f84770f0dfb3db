// precompute, answer and eval: flag parsing and the pipeline around rag/, retrieval/ and eval/.

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
#include "eval/alpha-fit.h"
#include "eval/baseline-cache.h"
#include "eval/gate.h"
#include "eval/metrics.h"
#include "eval/records.h"
#include "eval/report.h"
#include "eval/scoring.h"
#include "eval/tradeoff-plot.h"
#include "kv/claim-set.h"
#include "kv/kv-prefetch.h"
#include "kv/kv-tiers.h"
#include "kv/variant-ledger.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "rag/answer.h"
#include "rag/answer-batch.h"
#include "rag/cache-keys.h"
#include "rag/chunk-access-table.h"
#include "rag/chunk-overlap.h"
#include "rag/context.h"
#include "rag/cost-profile.h"
#include "rag/loading-controller.h"
#include "rag/mode-spec.h"
#include "rag/selection.h"
#include "rag/precompute.h"
#include "rag/variant-compute.h"
#include "rag/queries.h"
#include "rag/query-order.h"
#include "rag/retrieval-pipeline.h"
#include "model/embedder.h"
#include "retrieval/index-dir.h"
#include "util/error.h"
#include "util/file-io.h"
#include "util/line-writer.h"
#include "util/paths.h"
#include "util/progress.h"
#include "util/turn-lock.h"

namespace ragkv::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct RagFlags {  // shared by answer and eval
  std::string queries, index, store, model, embedder, on_error = "fail";
  size_t top_k = 5, limit = 0;
  double recompute_ratio = kDefaultRecomputeRatio;
  int check_layers = 3;
  std::vector<int> check_at;
  std::string select = "auto";
  int sink_tokens = 0;
  double adaptive = 0;
  std::optional<double> alpha;  // craft: --alpha, else the store's fitted α, else kDefaultAlpha
  int focus_window = CraftParams{}.focus_window;
  int max_tokens = 32;
  size_t batch = 8;
  DeviceFlags dev;
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
// An error answering query q, said where: "<file>:<line>: query <id>: <what>" (the message as it
// is when it names the file already).
std::string where(const Query& q, const Error& e) {
  const std::string what = e.what();
  if (what.starts_with(q.source + ":")) return what;
  return fmt::format("{}:{}: query {}: {}", q.source, q.line, q.id, what);
}

// The index's tokenizer fingerprint checked against the model's (a warning: IndexDir says why).
void warn_if_other_tokenizer(const IndexDir& index, const Model& model) {
  if (const std::string w = index.tokenizer_mismatch(tokenizer_fingerprint(model.gguf())); !w.empty())
    std::fprintf(stderr, "ragkv: warning: %s\n", w.c_str());
}

// Everything answer and eval need: queries, index, model, store, retriever.
struct Pipeline {
  QueryFile queries;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Embedder> embedder;
  std::unique_ptr<IndexDir> index;
  std::unique_ptr<Model> model;
  std::unique_ptr<PromptFormat> format;
  std::optional<KvStore> store;
  // Over the store: managed (the knowledge tree with budgets) for answer, else explicit placement
  // only (nothing placed: eval's modes all read the store as it is).
  std::unique_ptr<KvTiers> tiers;
  std::unique_ptr<ContextRetriever> retriever;
  std::unique_ptr<RagAnswerer> answerer;
  CraftStoreSettings craft_settings;       // the store's fitted α and variant budget
  std::unique_ptr<VariantLedger> ledger;   // f_r of the variants answers use
  std::unique_ptr<LoadingController> load_controller;  // answer --load-control report|on

  Pipeline(const RagFlags& f, bool need_store, const CacheFlags* cache = nullptr) {
    queries = load_queries(f.queries, parse_on_error(f.on_error));
    for (const auto& p : queries.skipped) std::fprintf(stderr, "ragkv: skipped %s\n", p.message.c_str());
    if (f.limit > 0 && queries.queries.size() > f.limit) queries.queries.resize(f.limit);
    backend = f.dev.make_backend();
    const bool search = std::any_of(queries.queries.begin(), queries.queries.end(),
                                    [](const Query& q) { return q.passages.empty(); });
    if (search) {
      embedder = std::make_unique<Embedder>();
      embedder->load(f.embedder, *backend);
    }
    index = std::make_unique<IndexDir>(IndexDir::open(f.index, embedder ? embedder->fingerprint() : ""));
    model = std::make_unique<Model>(f.model, *backend);
    warn_if_other_tokenizer(*index, *model);
    format = std::make_unique<PromptFormat>(*model);
    if (need_store && f.store.empty()) fail("--store is required");
    if (!f.store.empty()) {
      const CacheKeys keys(*model, *format);
      store = KvStore::open_for_read(f.store, keys.model_fingerprint());
      if (store->foreign())
        std::fprintf(stderr, "ragkv: warning: %s was built for model %s (%s), not %s: its caches are not used\n",
                     f.store.c_str(), store->info().model_name.c_str(), store->info().model_fingerprint.c_str(),
                     keys.model_fingerprint().c_str());
      if (cache && !store->foreign()) {
        tiers = std::make_unique<KvTiers>(*store, cache->config(*backend), *backend);
        if (cache->load_control != "off") {  // the T(α, β) grid and the tiers' read rates
          const MachineProfile m = load_or_profile_machine(cache->cost_profile, *model,
                                                           CacheKeys(*model, *format).model_fingerprint(), &*store);
          if (m.measured_prefill || m.measured_tiers)
            std::fprintf(stderr, "ragkv: machine profile measured%s%s\n", cache->cost_profile.empty() ? "" : " into ",
                         cache->cost_profile.c_str());
          tiers->cost() = m.prefill;
          load_controller = std::make_unique<LoadingController>(m.tiers, m.prefill, model->config().n_layer);
        } else if (!cache->cost_profile.empty()) {
          bool measured = false;
          tiers->cost() = load_or_profile_prefill_cost(cache->cost_profile, *model,
                                                       CacheKeys(*model, *format).model_fingerprint(), &measured);
          if (measured) std::fprintf(stderr, "ragkv: prefill cost profiled into %s\n", cache->cost_profile.c_str());
        }
        if (tiers->bad_files() > 0)
          std::fprintf(stderr, "ragkv: %zu knowledge-tree files in %s failed their checks: not used\n",
                       tiers->bad_files(), f.store.c_str());
      } else {
        tiers = std::make_unique<KvTiers>(*store);
      }
      if (!store->foreign()) {
        craft_settings = read_craft_settings(*store);
        ledger = std::make_unique<VariantLedger>(*store);
      }
    }
    retriever = std::make_unique<ContextRetriever>(*index, embedder.get(), f.top_k);
    answerer = std::make_unique<RagAnswerer>(*model, *format, tiers.get(), ledger.get());
  }

  // The blend parameters the flags give a variant that names no method or ratio; --select auto
  // is the default method of the model's architecture.
  BlendParams blend_defaults(const RagFlags& f) const {
    BlendParams b;
    b.recompute_ratio = f.recompute_ratio;
    b.check_layers = f.check_layers;
    b.check_at = f.check_at;
    b.selection = resolve_selection(f.select, model->config());
    b.sink_tokens = f.sink_tokens;
    b.adaptive_mass = f.adaptive;
    return b;
  }

  double craft_alpha(const RagFlags& f) const { return f.alpha.value_or(craft_settings.alpha.value_or(kDefaultAlpha)); }

  // Cache-Craft §3.3: each use of a non-canonical variant raises its f_r by 1/CFO.
  void record_variant_uses(const AnswerRecord& r) {
    if (!ledger) return;
    for (const CraftChunkRecord& c : r.craft)
      if (c.context_chunks > 0 && !c.variant.empty()) ledger->record_use(c.variant, c.cfo);
  }

  AnswerOptions options(const RagFlags& f, const ModeSpec& spec) const {
    AnswerOptions o;
    o.mode = spec.mode;
    o.blend = spec.blend(blend_defaults(f));
    CraftParams craft;
    craft.alpha = craft_alpha(f);
    craft.focus_window = f.focus_window;
    o.craft = spec.craft(craft);
    o.gen.max_tokens = f.max_tokens;
    return o;
  }
};

void add_rag_flags(CLI::App* c, RagFlags& f) {
  f.model = default_llm_path();
  f.embedder = default_embedder_dir();
  c->add_option("QUERIES", f.queries, "Queries JSONL {id,question,answers?,passages?}")->required();
  c->add_option("--index", f.index, "Index directory (build-index)")->required();
  c->add_option("--model", f.model, "LLM in GGUF format")->capture_default_str();
  c->add_option("--embedder", f.embedder, "Sentence-embedder directory (for queries without passages)")->capture_default_str();
  c->add_option("--top-k", f.top_k, "Chunks retrieved per question (queries with \"passages\" use those)")->check(CLI::Range(1, 1000))->capture_default_str();
  c->add_option("--recompute-ratio", f.recompute_ratio, "blend: fraction of reused tokens recomputed per layer")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  c->add_option("--check-layers", f.check_layers, "blend: layers 1..N select HKVD tokens by gradual filtering (1: one check layer)")->check(CLI::Range(1, 1024))->capture_default_str();
  c->add_option("--check-at", f.check_at, "blend: explicit check layers, ascending, comma-separated (instead of 1..N)")->delimiter(',')->check(CLI::Range(1, 1 << 16));
  c->add_option("--select", f.select, "blend: how tokens to recompute are chosen (auto: the default of the model's architecture)")->check(CLI::IsMember(selection_choices()))->capture_default_str();
  c->add_option("--adaptive", f.adaptive, "blend: per query, recompute the fewest tokens holding this share of the selection's score mass, within [1/2, 2] x r (0: a fixed r)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  c->add_option("--sink-tokens", f.sink_tokens, "blend sink methods: first tokens per chunk recomputed (0: ceil(r x chunk) for sink, 4 with +v)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  c->add_option("--alpha", f.alpha, fmt::format("craft, auto: alpha of the Cache Fix Overhead, CFO = alpha x CCI x (1 - beta') (Cache-Craft Eq. 12); default: the store's fitted alpha (eval --fit-alpha), else {}", kDefaultAlpha))->check(CLI::Range(0.0, 10.0));
  c->add_option("--focus-window", f.focus_window, "craft: layers the question's focused chunks must hold before the others stop being recomputed (Cache-Craft Algorithm 1's w; 0: never stop)")->check(CLI::Range(0, 1024))->capture_default_str();
  c->add_option("--max-tokens", f.max_tokens, "Maximum answer tokens")->check(CLI::Range(1, 4096))->capture_default_str();
  c->add_option("--batch", f.batch, "Answers decoded together: up to N prompts in flight, each prefilled on admission, all decoded in one step per token (continuous batching; answers equal --batch 1's)")->check(CLI::Range(size_t(1), size_t(256)))->capture_default_str();
  c->add_option("--limit", f.limit, "Answer only the first N queries (0: all)")->check(CLI::NonNegativeNumber);
  c->add_option("--on-error", f.on_error, "Bad query lines and unanswerable queries: fail, or skip and count")->check(CLI::IsMember(on_error_names()))->capture_default_str();
  f.dev.add_to(c);
}

// Per-mode running means for the stderr summary of `answer`.
struct ModeTotals {
  size_t n = 0, n_gold = 0;
  double ttft = 0, prefill = 0, recompute = 0, f1 = 0, em = 0, load = 0, hidden = 0;
  double hits = 0, misses = 0, bad = 0, written_back = 0, output_tokens = 0, deduplicated = 0;
  double device_hits = 0, host_hits = 0, disk_hits = 0, chunk_hits = 0, chunk_memory_hits = 0, chunks = 0;
  double exact_path_chunks = 0;
  double prompt_tokens = 0, computed_tokens = 0;
  double vs_full_f1 = 0, vs_full_first = 0;
  size_t n_compare = 0;
  LoadControlSummary load_control;  // answer --load-control report|on
  json to_json() const {
    auto m = [&](double s, size_t k) { return k ? json(s / double(k)) : json(nullptr); };
    return {{"queries", n}, {"ttft_ms", m(ttft, n)}, {"prefill_ms", m(prefill, n)}, {"recompute_ratio", m(recompute, n)},
            {"load_ms", m(load, n)}, {"load_hidden_ms", m(hidden, n)}, {"f1", m(f1, n_gold)}, {"em", m(em, n_gold)},
            {"cache_hits", hits}, {"cache_hits_per_tier", {{"device", device_hits}, {"host", host_hits}, {"disk", disk_hits}}},
            {"chunks_retrieved", chunks}, {"chunk_hits", chunk_hits},
            {"chunk_hit_rate", chunks > 0 ? json(chunk_hits / chunks) : json(nullptr)},  // RAGCache §7: hit chunks / retrieved
            {"chunk_memory_hit_rate", chunks > 0 ? json(chunk_memory_hits / chunks) : json(nullptr)},  // from device or host
            {"exact_path_chunks", exact_path_chunks}, {"prompt_tokens", prompt_tokens},
            {"computed_tokens", computed_tokens}, {"cache_misses", misses}, {"cache_bad", bad}, {"variants_written", written_back},
            {"f1_vs_full", m(vs_full_f1, n_compare)}, {"first_token_match", m(vs_full_first, n_compare)},
            {"load_control", load_control.empty() ? json(nullptr) : load_control.to_json()}};
  }
};

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

int RagCommands::run_precompute() {
  auto backend = pc_dev.make_backend();
  std::unique_ptr<Embedder> embedder;
  std::optional<QueryFile> qf, warmup;
  if (!pc_queries.empty()) qf = load_queries(pc_queries, OnError::fail);
  if (!pc_warmup.empty()) warmup = load_queries(pc_warmup, OnError::fail);
  auto searches = [](const std::optional<QueryFile>& f) {
    return f && std::any_of(f->queries.begin(), f->queries.end(), [](const Query& q) { return q.passages.empty(); });
  };
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
  std::vector<const Chunk*> chunks;
  if (qf) {
    const ContextRetriever retriever(index, embedder.get(), pc_top_k);
    std::set<std::string> seen;
    Progress bar("precompute: select", int64_t(qf->queries.size()), "queries");
    for (const Query& q : qf->queries) {
      for (const Chunk* c : retriever.context_for(q).chunks)
        if (seen.insert(c->id).second) chunks.push_back(c);
      bar.add();
    }
  } else {
    for (const Chunk& c : index.chunks()) chunks.push_back(&c);
  }
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
  // after its nearest neighbours in the index, most similar last (FusionRAG's offline step).
  std::vector<std::vector<const Chunk*>> sequences;
  bool only_last = false;
  if (warmup) {
    const ContextRetriever retriever(index, embedder.get(), pc_top_k);
    for (const Query& q : warmup->queries) sequences.push_back(retriever.context_for(q).chunks);
  } else if (pc_neighbours > 0 && index.chunks().size() > 1) {
    only_last = true;
    const size_t dim = index.manifest().dim;
    for (const Chunk* c : chunks) {
      const size_t row = size_t(c - index.chunks().data());
      const auto hits = index.search(index.embeddings().subspan(row * dim, dim), pc_neighbours + 1);
      std::vector<const Chunk*> seq;
      for (const Hit& h : hits)
        if (h.chunk != row && seq.size() < pc_neighbours) seq.push_back(&index.chunks()[h.chunk]);
      std::reverse(seq.begin(), seq.end());
      seq.push_back(c);
      sequences.push_back(std::move(seq));
    }
  }
  std::optional<Progress> vbar;
  VariantLedger ledger(store);
  const VariantComputeStats vs = precompute_variants(model, format, store, sequences, only_last, &ledger, [&](size_t done, size_t total) {
    if (!vbar) vbar.emplace(warmup ? "precompute: warm-up variants" : "precompute: neighbour variants", int64_t(total), "variants");
    vbar->set(int64_t(done));
  }, &claims);
  if (vbar) vbar->finish();
  const auto [files, bytes] = store.usage();
  const ModelConfig& c = model.config();
  const KvEncoding encoding = store.info().encoding();
  // K and V of every layer, per token of a long chunk (group scales included)
  const double bytes_per_token = kv_bytes_per_token(encoding, uint32_t(c.n_layer), uint32_t(c.kv_dim()));
  std::cout << json{{"store", pc_store}, {"model", keys.model_fingerprint()}, {"chunks_selected", chunks.size()},
                    {"computed", st.computed}, {"skipped", st.skipped}, {"claimed_by_other", st.claimed_by_other},
                    {"taken_over", st.taken_over}, {"tokens", st.tokens},
                    {"seconds", st.seconds}, {"tokens_per_s", st.seconds > 0 ? double(st.tokens) / st.seconds : 0.0},
                    {"bytes_written", st.bytes_written + vs.bytes_written}, {"kv_bytes_per_token", bytes_per_token},
                    {"kv_dtype", encoding.name()},
                    {"variants", {{"source", warmup ? "warmup" : sequences.empty() ? "none" : "neighbours"},
                                  {"computed", vs.computed}, {"skipped", vs.skipped},
                                  {"claimed_by_other", vs.claimed_by_other}, {"taken_over", vs.taken_over}, {"tokens", vs.tokens},
                                  {"over_budget", vs.over_budget}, {"evicted", vs.evicted},
                                  {"seconds", vs.seconds}}},
                    {"store_files", files}, {"store_bytes", bytes}}
                   .dump()
            << "\n";
  return 0;
}

int RagCommands::run_answer() {
  Pipeline p(an, false, &an_cache);
  const ModeSpec mode = !an_mode.empty() ? parse_mode_spec(an_mode) : ModeSpec(p.store ? ReuseMode::auto_ : ReuseMode::full);
  if (an_cache.load_control != "off" && !p.load_controller)
    std::fprintf(stderr, "ragkv: answer: --load-control %s: no store of this model, nothing is loaded\n",
                 an_cache.load_control.c_str());
  const bool compare = !an_compare.empty();
  const ModeSpec compare_mode = compare ? parse_mode_spec(an_compare) : ModeSpec(ReuseMode::full);
  if (compare_mode.freq_order) fail("--compare {}: the comparison answers over the same chunks, in the same order; drop '+freq'", an_compare);
  if (mode.freq_order) an_chunk_order = "freq";  // MODE+freq is --chunk-order freq
  LineWriter out(an_out);
  ModeTotals tot;
  size_t skipped = 0;
  const std::vector<Query>& queries = p.queries.queries;
  auto skip = [&](const Query& q, const Error& e) {
    if (an.on_error != "skip") throw Error(where(q, e));
    ++skipped;
    std::fprintf(stderr, "ragkv: skipped %s\n", where(q, e).c_str());
  };
  // Retrieval (rag/retrieval-pipeline.h): by a worker thread ahead of the answering loop, which
  // holds backend_turn while it computes (the worker embeds on the same backend in between); or,
  // by default, the whole file first (issue 14: a batch knows its queries up front).
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  const bool pipelined = an_pipeline;
  const CacheKeys keys(*p.model, *p.format);
  TurnLock backend_turn;
  std::unique_ptr<KvPrefetcher> prefetch;
  if (pipelined && an_search_slice > 0 && p.store && !p.store->foreign()) prefetch = std::make_unique<KvPrefetcher>(*p.store);
  RetrievalPipeline retrieval(*p.retriever, queries, {pipelined, an_search_slice}, &backend_turn, prefetch.get(),
                              prefetch ? tree_load_plan(keys, *p.format) : LoadPlan{});
  double retrieve_wall_ms = 0;
  if (!pipelined) {
    const auto t0 = Clock::now();
    Progress rbar("answer: retrieve", int64_t(queries.size()), "queries");
    retrieval.run_all([&] { rbar.add(); });
    rbar.finish();
    retrieve_wall_ms = ms_since(t0);
  }
  // Each query's chunks and prompt shape, taken from the pipeline when first needed (nullopt:
  // skipped at retrieval).
  std::vector<std::optional<RagContext>> contexts(queries.size());
  std::vector<QueryShape> shapes(queries.size());
  std::vector<uint8_t> fetched(queries.size(), 0);
  std::vector<double> wait_of(queries.size(), 0.0);  // the answering loop waiting for its retrieval
  auto fetch = [&](size_t i) {
    if (fetched[i]) return;
    fetched[i] = 1;
    const double waited = retrieval.waited_ms();
    try {
      contexts[i] = retrieval.wait(i);
      shapes[i].path = {kPrefixChunkId};
      for (const Chunk* c : contexts[i]->chunks) shapes[i].path.push_back(c->id);
      shapes[i].prompt_tokens = p.format->build(contexts[i]->chunks, queries[i].question).n_tokens();
    } catch (const Error& e) {
      contexts[i].reset();
      wait_of[i] = retrieval.waited_ms() - waited;
      skip(queries[i], e);
    }
    wait_of[i] = retrieval.waited_ms() - waited;
  };
  // Conversations (CRAFT §4.3): a turn continues its conversation's earlier turns, so turns are
  // answered in input order, one at a time per conversation; their turn numbers must increase.
  struct Conversation {
    std::vector<PastTurn> turns;      // answered so far
    std::set<std::string> chunks;     // every chunk already in the conversation's prompt
    std::optional<int> last_turn;     // the last turn number seen in the file
    bool in_flight = false;
  };
  std::map<std::string, Conversation> conversations;
  for (const Query& q : queries) {
    if (q.conversation.empty()) continue;
    Conversation& c = conversations[q.conversation];
    if (c.last_turn && q.turn <= *c.last_turn)
      fail("{}:{}: query {}: turn {} of conversation {} follows turn {}: a conversation's turns must come in increasing order",
           q.source, q.line, q.id, q.turn, q.conversation, *c.last_turn);
    c.last_turn = q.turn;
  }
  const bool reorder = !an_no_reorder && conversations.empty();
  if (!an_no_reorder && !conversations.empty())
    std::fprintf(stderr, "ragkv: answer: %zu conversations: queries are answered in input order\n", conversations.size());
  // The answering order (rag/query-order.h). Reordering orders retrieved queries: without the
  // pipeline, the whole file at once; with it, consecutive blocks of --reorder-window queries
  // (input order; 0: the whole file), each grouped and then answered best-cached first once all
  // of it is retrieved — a file no longer than the window is ordered as without the pipeline.
  const size_t n_queries = queries.size();
  const size_t block = !pipelined ? n_queries : !reorder ? 1 : an_reorder_window == 0 ? n_queries : an_reorder_window;
  std::optional<QueryOrder> order;
  size_t block_begin = 0, block_end = 0;
  constexpr size_t kNone = ~size_t(0);
  constexpr size_t kNotReady = kNone - 1;
  // The next query to answer, kNone when none is left, or (may_wait false) kNotReady while the
  // next block is still being retrieved.
  auto next_query = [&](bool may_wait) -> size_t {
    for (;;) {
      if (order) {
        if (const std::optional<size_t> next = order->next(p.tiers ? p.tiers->tree() : nullptr)) return block_begin + *next;
        order.reset();
      }
      if (block_end == n_queries) return kNone;
      const size_t end = std::min(n_queries, block_end + block);
      if (!may_wait && !retrieval.ready(end - 1)) return kNotReady;
      std::vector<QueryShape> block_shapes;
      for (size_t i = block_end; i < end; ++i) {
        fetch(i);
        block_shapes.push_back(shapes[i]);
      }
      block_begin = block_end;
      block_end = end;
      order.emplace(std::move(block_shapes), an_reorder_window, reorder, mode.mode == ReuseMode::prefix);
    }
  };
  ChunkAccessTable ca(an_ca_window, an_promotion_threshold);
  std::vector<std::optional<std::string>> lines(queries.size());
  std::vector<uint8_t> done(queries.size(), 0);
  size_t written = 0;
  auto flush = [&] {  // the answered queries at the head of the input order
    for (; written < queries.size() && done[written]; ++written)
      if (lines[written]) out.line(*lines[written]), lines[written].reset();
  };
  std::vector<size_t> answered_order;
  std::vector<std::vector<std::string>> prompt_chunks;  // each prompt's chunk ids, in answering order
  Progress bar("answer", int64_t(queries.size()), "queries");
  // Continuous batching (rag/answer-batch.h): admit prompts while there is room — each prefilled
  // at once, in answering order, so the tiers evolve as with --batch 1 — then one decode step.
  AnswerBatch batch(*p.answerer, an.batch);
  std::map<size_t, std::optional<AnswerRecord>> compared;  // --compare's answer, computed at admission
  std::map<size_t, std::vector<const Chunk*>> chunks_of;    // a conversation turn's added chunks
  std::map<size_t, size_t> history_of, deduplicated_of;     // its earlier turns in the prompt, chunks dropped
  auto finish_query = [&](size_t qi) {
    done[qi] = 1;
    if (!queries[qi].conversation.empty()) conversations.at(queries[qi].conversation).in_flight = false;
    contexts[qi].reset();
    bar.add();
    flush();
  };
  auto complete = [&](size_t qi, AnswerRecord&& r) {
    const Query& q = queries[qi];
    r.retrieval_ms = contexts[qi]->retrieval_ms;
    r.mode = mode.name();
    p.record_variant_uses(r);
    tot.written_back += r.written_back;
    tot.output_tokens += double(r.output_ids.size());
    json m = r.metrics();
    m["retrieval_wait_ms"] = wait_of[qi];  // the answering loop blocked on this query's retrieval
    json line = {{"id", q.id}, {"answer", r.answer}, {"mode", r.mode}, {"chunks", r.chunk_ids}};
    if (!q.conversation.empty()) {
      Conversation& c = conversations.at(q.conversation);
      c.turns.push_back({chunks_of.at(qi), q.question, r.answer});
      c.in_flight = false;
      line["conversation"] = q.conversation;
      line["turn"] = q.turn;
      m["history_turns"] = history_of.at(qi);
      m["chunks_deduplicated"] = deduplicated_of.at(qi);
      tot.deduplicated += double(deduplicated_of.at(qi));
    }
    ++tot.n;
    tot.ttft += r.ttft_ms();
    tot.prefill += r.prefill.prefill_ms;
    tot.recompute += r.prefill.recompute_fraction();
    tot.load += r.prefill.load_ms;
    tot.hidden += std::max(0.0, r.prefill.load_ms - r.prefill.load_wait_ms);
    tot.hits += r.cache.hits();
    tot.device_hits += r.cache.device_hits;
    tot.host_hits += r.cache.host_hits;
    tot.disk_hits += r.cache.disk_hits;
    tot.chunk_hits += double(r.chunk_hits);
    tot.chunk_memory_hits += double(r.chunk_memory_hits);
    tot.chunks += double(r.chunk_ids.size());
    tot.exact_path_chunks += double(r.exact_path_chunks);
    tot.prompt_tokens += double(r.prefill.prompt_tokens);
    if (r.prefill.n_layer > 0) tot.computed_tokens += double(r.prefill.computed_token_layers) / r.prefill.n_layer;
    tot.misses += r.cache.misses;
    tot.bad += r.cache.bad;
    if (r.load_control) tot.load_control.add(*r.load_control, r.prefill.load_ms, r.prefill.prefill_ms);
    if (!q.answers.empty()) {
      const GoldScores g = score_against_golds(r.answer, q.answers);
      m["f1"] = g.f1;
      m["em"] = g.em;
      ++tot.n_gold;
      tot.f1 += g.f1;
      tot.em += g.em;
    }
    if (const auto c = compared.find(qi); c != compared.end() && c->second) {
      const AnswerRecord& b = *c->second;
      const std::string key = compare_mode.name();
      const Agreement a = score_against_baseline(r.answer, r.output_ids, b.answer, b.output_ids);
      line[key + "_answer"] = b.answer;
      m["f1_vs_" + key] = a.f1;
      m["rougeL_vs_" + key] = a.rouge_l;
      m["first_token_match"] = a.first_token;
      m["kl_first_token_vs_" + key] = kl_divergence_logits(b.first_logits, r.first_logits);
      ++tot.n_compare;
      tot.vs_full_f1 += a.f1;
      tot.vs_full_first += a.first_token ? 1.0 : 0.0;
      compared.erase(c);
    }
    line["metrics"] = m;
    lines[qi] = line.dump();
  };
  auto admit = [&](size_t qi) {
    const Query& q = queries[qi];
    const RagContext& ctx = *contexts[qi];
    AnswerOptions opt = p.options(an, mode);
    opt.write_back = an_write_back;
    opt.record_in_tiers = true;
    opt.load_control = p.load_controller.get();
    opt.apply_load_control = an_cache.load_control == "on";
    opt.raise_ratio = an_cache.raise_ratio;
    // CRAFT §4: the CA-Table counts this request's chunks; --chunk-order freq puts the most
    // accessed first; the CP-Tree admits a computed prefix only when its chunks reach the threshold.
    std::vector<const Chunk*> chunks = ctx.chunks;
    std::vector<std::string> ids;
    for (const Chunk* c : chunks) ids.push_back(c->id);
    if (an_chunk_order == "freq") {
      const std::vector<size_t> perm = ca.frequency_order(ids);
      chunks = permuted(chunks, perm);
      ids = permuted(ids, perm);
    }
    ca.record(ids);
    if (an_promotion_threshold > 1) opt.promote = ca.promoted(ids);
    if (!q.conversation.empty()) {
      Conversation& c = conversations.at(q.conversation);
      size_t dropped = 0;
      if (!an_no_dedup) {  // CRAFT §4.3: only the chunks this turn adds to the conversation
        std::vector<const Chunk*> fresh;
        for (const Chunk* ch : chunks) {
          if (c.chunks.count(ch->id))
            ++dropped;
          else
            fresh.push_back(ch);
        }
        chunks = std::move(fresh);
        opt.promote.clear();
      }
      // The earliest turns leave the prompt when it would overflow the context (CRAFT §4.3: their
      // information lives on in the later answers that remain).
      opt.history = c.turns;
      const int64_t room = p.model->config().n_ctx_train - an.max_tokens;
      while (!opt.history.empty() && p.format->build(chunks, q.question, opt.history).n_tokens() > room)
        opt.history.erase(opt.history.begin());
      history_of[qi] = opt.history.size();
      deduplicated_of[qi] = dropped;
      chunks_of[qi] = chunks;
    }
    // The comparison answer first (it does not touch the tiers): a failure leaves nothing in flight.
    if (compare) {
      AnswerOptions co = p.options(an, compare_mode);
      co.history = opt.history;
      compared[qi] = p.answerer->answer(q.question, chunks, co);
    }
    batch.admit(qi, q.question, chunks, opt);
    prompt_chunks.emplace_back();
    for (const Chunk* ch : chunks) prompt_chunks.back().push_back(ch->id);
    if (!q.conversation.empty()) {
      Conversation& c = conversations.at(q.conversation);
      c.in_flight = true;
      for (const Chunk* ch : chunks) c.chunks.insert(ch->id);
    }
  };
  // The answering loop computes only while holding backend_turn; the time it waited for the turn
  // is the worker's embedding that compute did not hide.
  double turn_wait_ms = 0;
  auto compute_turn = [&] {
    const auto t0 = Clock::now();
    std::unique_lock<TurnLock> turn(backend_turn);
    turn_wait_ms += ms_since(t0);
    return turn;
  };
  const auto t_answer = std::chrono::steady_clock::now();
  bool more = true;
  size_t held = kNone;  // the next query, when it waits for its conversation
  while (more || !batch.empty()) {
    while (more && batch.can_admit()) {
      if (held == kNone) {
        // With answers in flight, a query still being retrieved does not stall them: decode on.
        const size_t next = next_query(batch.empty());
        if (next == kNotReady) break;
        if (next == kNone) {
          more = false;
          break;
        }
        held = next;
      }
      const size_t qi = held;
      // A turn waits until its conversation's previous turn has its answer.
      if (!queries[qi].conversation.empty() && conversations.at(queries[qi].conversation).in_flight) break;
      held = kNone;
      if (!contexts[qi]) {  // skipped at retrieval
        finish_query(qi);
        continue;
      }
      answered_order.push_back(qi);
      try {
        const auto turn = compute_turn();
        admit(qi);
      } catch (const Error& e) {
        compared.erase(qi);
        skip(queries[qi], e);
        finish_query(qi);
      }
    }
    if (batch.empty()) continue;
    std::vector<std::pair<size_t, AnswerRecord>> finished;
    {
      const auto turn = compute_turn();
      finished = batch.step();
    }
    for (auto& [qi, r] : finished) {
      try {
        complete(qi, std::move(r));
      } catch (const Error& e) {
        skip(queries[qi], e);
      }
      finish_query(qi);
    }
  }
  const double answer_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_answer).count();
  bar.finish();
  flush();
  out.close();
  // The uses only order later evictions (f_r): a store this process cannot write (read-only media,
  // a shared cache mounted read-only) keeps every answer, with the uses left unrecorded.
  if (p.ledger) {
    try {
      p.ledger->flush();
    } catch (const Error& e) {
      std::fprintf(stderr, "ragkv: warning: variant uses (f_r) not recorded in the store: %s\n", e.what());
    }
  }
  json summary = {{"mode", mode.name()}, {"skipped_lines", p.queries.skipped.size()}, {"skipped_queries", skipped}};
  summary.update(tot.to_json());
  if (compare) summary["compare"] = compare_mode.name();
  summary["reordered"] = reorder;
  if (!conversations.empty()) {
    summary["conversations"] = conversations.size();
    summary["dedup"] = !an_no_dedup;
    summary["chunks_deduplicated"] = tot.deduplicated;
  }
  // Throughput of the answering phase (after retrieval; with --compare, its answers included).
  summary["batch"] = an.batch;
  summary["answer_wall_s"] = answer_s;
  summary["answers_per_s"] = answer_s > 0 ? json(double(tot.n) / answer_s) : json(nullptr);
  summary["output_tokens"] = tot.output_tokens;
  summary["mean_decode_batch"] =
      batch.steps() > 0 ? json(double(batch.sequence_steps()) / double(batch.steps())) : json(nullptr);
  size_t moved = 0;
  for (size_t i = 0; i < answered_order.size(); ++i) moved += i == 0 || answered_order[i] != answered_order[i - 1] + 1;
  summary["order_runs"] = moved;  // maximal runs of consecutive input queries answered in sequence
  const ChunkOverlap overlap = chunk_overlap(prompt_chunks);  // CRAFT §3, in answering and prompt order
  summary["craft_prefix_overlap"] = overlap.prefix;
  summary["craft_total_overlap"] = overlap.total;
  if (reorder && pipelined) summary["reorder_block"] = block;
  // Search time not hidden behind compute (RAGCache §7.4, Table 3's non-overlapping search time):
  // without the pipeline, the whole retrieval phase; with it, the answering loop blocked on a
  // query's retrieval plus its waits for the backend while the worker embedded.
  {
    const RetrievalStats rs = retrieval.stats();
    const double unhidden = pipelined ? retrieval.waited_ms() + turn_wait_ms : retrieve_wall_ms;
    json search = {{"pipelined", pipelined}, {"speculative", prefetch != nullptr}, {"slice", prefetch ? an_search_slice : 0},
                   {"queries_searched", rs.searched}, {"search_ms", rs.search_ms}, {"embed_ms", rs.embed_ms},
                   {"hnsw_ms", rs.hnsw_ms}, {"retrieve_phase_ms", retrieve_wall_ms},
                   {"unhidden_search_ms", unhidden},
                   {"unhidden_search_ms_per_query", tot.n ? json(unhidden / double(tot.n)) : json(nullptr)},
                   {"retrieval_wait_ms", retrieval.waited_ms()}, {"answer_turn_wait_ms", turn_wait_ms},
                   {"worker_turn_wait_ms", rs.turn_wait_ms}};
    if (prefetch) {
      const KvPrefetchStats ps = prefetch->stats();
      search["speculation"] = {{"speculations", rs.speculations}, {"restarts", rs.restarts},
                               {"tree_paths_started", rs.items_started}, {"tree_paths_wasted", rs.items_wasted},
                               {"loads_wanted", ps.wanted}, {"loads_started", ps.started}, {"loads_completed", ps.completed},
                               {"loads_missing", ps.missing}, {"loads_failed", ps.failed}, {"loads_dropped", ps.dropped},
                               {"loads_stopped", ps.stopped}, {"wasted_loads", ps.wasted_loads},
                               {"bytes_read", ps.bytes_read}, {"wasted_bytes", ps.wasted_bytes},
                               {"loader_busy_ms", ps.busy_ms}, {"speculate_ms", rs.speculate_ms}};
    }
    summary["search"] = search;
    summary["wall_s"] = retrieve_wall_ms / 1000.0 + answer_s;  // retrieval phase (without --pipeline) + answering
  }
  if (p.tiers && p.tiers->tree()) {
    const KnowledgeTree& t = *p.tiers->tree();
    json tiers = json::object();
    for (KvTier k : {KvTier::device, KvTier::host, KvTier::disk}) {
      const TierStats st = t.stats(k);
      tiers[kv_tier_name(k)] = {{"budget", st.budget}, {"bytes", st.bytes}, {"nodes", st.nodes}, {"placed", st.placed},
                                {"evicted", st.evicted}, {"swapped_out", st.swapped_out}, {"rejected", st.rejected}};
    }
    summary["cache_manager"] = {{"policy", cache_policy_name(t.policy())}, {"tiers", tiers},
                                {"bad_tree_files", p.tiers->bad_files()}, {"tree_bytes_written", p.tiers->bytes_written()},
                                {"tree_write_failures", p.tiers->write_failures()}};
  }
  std::fprintf(stderr, "ragkv: answer summary: %s\n", summary.dump().c_str());
  if (!an_summary.empty()) write_file_atomic(an_summary, {summary.dump(2) + "\n"});
  if (tot.bad > 0)  // never silent: name the store and the command that rewrites the bad files
    std::fprintf(stderr,
                 "ragkv: warning: %s: %.0f chunk-cache reads failed their checks and were recomputed; `ragkv store repair "
                 "--store %s --index %s` (or the next precompute) rewrites the bad files\n",
                 an.store.c_str(), tot.bad, an.store.c_str(), an.index.c_str());
  if (tot.n == 0 && skipped > 0)
    fail("{}: every query was skipped ({} of {}, and {} bad lines): nothing was answered", an.queries, skipped,
         p.queries.queries.size(), p.queries.skipped.size());
  return 0;
}

int RagCommands::run_eval() {
  if (ev_resume && ev_answers.empty()) fail("--resume needs --answers FILE (the records to resume from)");
  Pipeline p(ev, true);
  if (ev_fit_alpha && p.store->foreign()) fail("--fit-alpha: {} belongs to another model", ev.store);
  // The variants: --modes as given, each blend variant without a ratio once per --sweep ratio,
  // and reuse — the reference recovery is measured against — when not given (not gated then).
  const ModeSpec baseline = parse_mode_spec(ev_baseline);
  std::vector<ModeSpec> specs;
  auto add = [&](const ModeSpec& s) {
    if (s.name() == baseline.name()) return;
    for (const ModeSpec& o : specs)
      if (o.name() == s.name()) return;
    specs.push_back(s);
  };
  for (const std::string& m : split_modes(ev_modes)) {
    const ModeSpec s = parse_mode_spec(m);
    if ((s.mode == ReuseMode::blend || s.mode == ReuseMode::craft) && !s.ratio && !ev_sweep.empty()) {
      for (double r : ev_sweep) {
        ModeSpec v = s;
        v.ratio = r;
        add(v);
      }
    } else {
      add(s);
    }
  }
  std::vector<std::string> gated;
  for (const ModeSpec& s : specs) gated.push_back(s.name());
  const std::string reference = "reuse";
  if (baseline.name() != reference) add(ModeSpec(ReuseMode::reuse));

  const BlendParams defaults = p.blend_defaults(ev);
  EvalSettings settings;
  settings.model_fingerprint = CacheKeys(*p.model, *p.format).model_fingerprint();
  settings.baseline = baseline.name();
  settings.modes = {baseline.name()};
  settings.recompute_ratio = ev.recompute_ratio;
  settings.check_layers = ev.check_layers;
  settings.max_tokens = ev.max_tokens;
  settings.top_k = ev.top_k;
  settings.selection = selection_name(defaults.selection);
  settings.sink_tokens = ev.sink_tokens;
  settings.check_at = ev.check_at;
  settings.adaptive = ev.adaptive;
  auto uses_alpha = [](const ModeSpec& s) { return s.mode == ReuseMode::craft || s.mode == ReuseMode::auto_; };
  settings.with_craft = uses_alpha(baseline) || std::any_of(specs.begin(), specs.end(), uses_alpha);
  if (settings.with_craft) {
    settings.alpha = p.craft_alpha(ev);
    settings.focus_window = ev.focus_window;
  }
  std::map<std::string, ModeSpec> spec_of{{baseline.name(), baseline}};
  std::map<std::string, double> nominal;
  for (const ModeSpec& s : specs) {
    settings.modes.push_back(s.name());
    spec_of.emplace(s.name(), s);
    if (s.mode == ReuseMode::blend) nominal[s.name()] = s.blend(defaults).recompute_ratio;
  }

  // --fit-alpha's candidates: craft without an ablation, each at its α.
  std::vector<AlphaCandidate> alpha_candidates;
  for (const ModeSpec& s : specs)
    if (s.mode == ReuseMode::craft && !s.ablation) alpha_candidates.push_back({s.name(), p.options(ev, s).craft.alpha});
  if (ev_fit_alpha && alpha_candidates.empty()) {
    std::fprintf(stderr, "ragkv: eval: --fit-alpha needs craft modes at several alphas (craft with --sweep, or craft@A,...)\n");
    return 2;
  }

  // --resume: keep the records of the latest run, interrupted (FILE.partial) or finished (FILE).
  std::vector<EvalItem> items;
  std::set<std::string> done;
  std::vector<std::string> kept;
  if (ev_resume) {
    std::set<std::string> ids;
    for (const Query& q : p.queries.queries) ids.insert(q.id);
    for (const std::string& from : {ev_answers + ".partial", ev_answers}) {
      if (!fs::exists(from)) continue;
      ResumedEval r = read_eval_records(from, settings, ids);
      std::fprintf(stderr, "ragkv: eval: resuming with %zu answered queries from %s%s\n", r.items.size(),
                   from.c_str(), r.dropped_partial_line ? " (its unfinished last line dropped)" : "");
      items = std::move(r.items);
      done = std::move(r.ids);
      kept = std::move(r.lines);
      break;
    }
  }
  std::unique_ptr<LineWriter> answers;
  if (!ev_answers.empty()) answers = std::make_unique<LineWriter>(ev_answers, kept);

  std::optional<BaselineCache> baseline_cache;
  if (!ev_baseline_cache.empty()) {
    if (baseline.mode != ReuseMode::full && baseline.mode != ReuseMode::prefix)
      fail("--baseline-cache keeps full and prefix baselines, not {}", baseline.name());
    baseline_cache.emplace(ev_baseline_cache);
  }
  size_t skipped = 0, baselines_cached = 0;
  Progress bar("eval", int64_t((p.queries.queries.size() - done.size()) * settings.modes.size()), "answers");
  // Every (query, mode) answer is a job of one AnswerBatch (--batch N decodes N together; eval's
  // modes read the store as it is, so the order of jobs cannot change an answer); a query's record
  // is written once all its modes are in, in input order.
  const std::vector<Query>& qs = p.queries.queries;
  const size_t n_modes = settings.modes.size();
  struct OpenQuery {
    std::optional<RagContext> ctx;
    std::vector<const Chunk*> freq_chunks;  // CRAFT's frequency order, for the MODE+freq variants
    std::vector<std::string> chunk_ids;
    std::map<std::string, AnswerRecord> by_mode;
    std::optional<BaselineKey> key;
    size_t in_flight = 0;
    bool failed = false;
  };
  std::map<size_t, OpenQuery> open;
  auto fail_query = [&](size_t qi, const Error& e) {
    if (ev.on_error != "skip") throw Error(where(qs[qi], e));
    ++skipped;
    std::fprintf(stderr, "ragkv: skipped %s\n", where(qs[qi], e).c_str());
    open[qi].failed = true;
  };
  size_t emit = 0;  // the next query, in input order, to write
  auto emit_ready = [&] {
    for (; emit < qs.size(); ++emit) {
      if (done.count(qs[emit].id)) continue;
      const auto it = open.find(emit);
      if (it == open.end() || it->second.in_flight > 0) break;
      OpenQuery& oq = it->second;
      if (!oq.failed && oq.by_mode.size() < n_modes) break;
      if (!oq.failed) {
        const json record = eval_record(qs[emit].id, qs[emit].answers, oq.chunk_ids, oq.by_mode, settings);
        if (answers) answers->line(record.dump());
        items.push_back(eval_item_of(record, settings));
      }
      open.erase(it);
    }
  };
  AnswerBatch batch(*p.answerer, ev.batch);
  // MODE+freq (CRAFT §4): the CA-Table counts every query's chunks, in input order, once.
  const bool any_freq = std::any_of(spec_of.begin(), spec_of.end(), [](const auto& s) { return s.second.freq_order; });
  ChunkAccessTable ca(kDefaultCaWindow, 1);
  size_t next_query = 0, next_mode = 0;  // the next job to admit
  for (;;) {
    while (batch.can_admit() && next_query < qs.size()) {
      const size_t qi = next_query;
      const Query& q = qs[qi];
      if (done.count(q.id)) {
        ++next_query;
        continue;
      }
      OpenQuery& oq = open[qi];
      if (next_mode == 0 && !oq.ctx && !oq.failed) {  // the query's first job: retrieve
        try {
          oq.ctx = p.retriever->context_for(q);
          for (const Chunk* c : oq.ctx->chunks) oq.chunk_ids.push_back(c->id);
          if (any_freq) {
            oq.freq_chunks = permuted(oq.ctx->chunks, ca.frequency_order(oq.chunk_ids));
            ca.record(oq.chunk_ids);
          }
          if (baseline_cache) {
            oq.key = BaselineKey{settings.model_fingerprint, baseline.name(), ev.max_tokens,
                                 p.answerer->prompt_hash(q.question, baseline.freq_order ? oq.freq_chunks : oq.ctx->chunks)};
            if (std::optional<AnswerRecord> b = baseline_cache->find(*oq.key)) {
              oq.by_mode.emplace(baseline.name(), std::move(*b));
              ++baselines_cached;
              bar.add();
            }
          }
        } catch (const Error& e) {
          fail_query(qi, e);
        }
      }
      if (oq.failed || next_mode >= n_modes) {
        ++next_query;
        next_mode = 0;
        continue;
      }
      const size_t mi = next_mode++;
      if (oq.by_mode.count(settings.modes[mi])) continue;
      try {
        const ModeSpec& spec = spec_of.at(settings.modes[mi]);
        batch.admit(qi * n_modes + mi, q.question, spec.freq_order ? oq.freq_chunks : oq.ctx->chunks, p.options(ev, spec));
        ++oq.in_flight;
      } catch (const Error& e) {
        fail_query(qi, e);
      }
    }
    if (batch.empty()) {
      emit_ready();
      if (next_query >= qs.size()) break;
      continue;
    }
    for (auto& [tag, r] : batch.step()) {
      OpenQuery& oq = open.at(tag / n_modes);
      const std::string& m = settings.modes[tag % n_modes];
      --oq.in_flight;
      bar.add();
      if (oq.failed) continue;
      r.retrieval_ms = oq.ctx->retrieval_ms;
      if (oq.key && m == baseline.name()) baseline_cache->add(*oq.key, qs[tag / n_modes].id, r);
      oq.by_mode.emplace(m, std::move(r));
    }
    emit_ready();
  }
  bar.finish();
  if (answers) answers->close();
  if (items.empty())
    fail("{}: no query could be answered ({} skipped, {} bad lines, {} answered before --resume)", ev.queries, skipped,
         p.queries.skipped.size(), done.size());
  std::vector<std::string> order(settings.modes.begin() + 1, settings.modes.end());
  json summary = eval_summary(items, baseline.name(), order, reference, nominal);
  summary["skipped_lines"] = p.queries.skipped.size();
  summary["skipped_queries"] = skipped;
  summary["selection"] = settings.selection;
  if (baseline_cache) {
    // TTFT ratios then compare against baselines timed by earlier runs of this binary.
    summary["baseline_cache"] = {{"file", ev_baseline_cache}, {"taken", baselines_cached}};
    std::fprintf(stderr, "ragkv: eval: %zu baseline answers taken from %s\n", baselines_cached, ev_baseline_cache.c_str());
  }
  const std::vector<GateCheck> checks = gate_checks(summary, ev_gate, gated);
  summary["gate"] = gate_json(checks, ev_gate);
  if (!ev_report.empty()) {
    const fs::path report(ev_report);
    std::string picture;
    if (report.extension() == ".md" && has_sweep(summary)) {
      const TradeoffPlot plot = write_tradeoff_plot(summary, report.parent_path() / report.stem());
      if (plot.svg.empty())
        std::fprintf(stderr, "ragkv: eval: no picture (%s); its data and gnuplot script are %s, %s\n", plot.note.c_str(),
                     plot.data.c_str(), plot.script.c_str());
      else
        picture = plot.svg.filename().string();
    }
    write_file_atomic(report, {report.extension() == ".md" ? eval_markdown(summary, picture) : summary.dump(2) + "\n"});
  }
  if (!ev_junit.empty()) write_file_atomic(ev_junit, {gate_junit(checks, "ragkv-eval")});
  // Cache-Craft Eq. 13: the smallest α whose craft run passes the gate becomes the store's.
  std::optional<int> fit_exit;
  if (ev_fit_alpha) {
    const AlphaFit fit = fit_alpha(summary, checks, alpha_candidates);
    summary["alpha_fit"] = fit.table;
    if (fit.alpha) {
      CraftStoreSettings cs = read_craft_settings(*p.store);
      cs.alpha = *fit.alpha;
      cs.alpha_fit = {{"queries", ev.queries}, {"n_queries", items.size()}, {"gate", summary["gate"]},
                      {"candidates", fit.table}};
      write_craft_settings(*p.store, cs);
      std::fprintf(stderr, "ragkv: eval: alpha %g is the smallest that passes the gate; stored in %s/craft.json\n",
                   *fit.alpha, ev.store.c_str());
      fit_exit = 0;
    } else {
      std::fprintf(stderr, "ragkv: eval: no alpha tried passes the gate; %s/craft.json unchanged\n", ev.store.c_str());
      fit_exit = 1;
    }
  }
  std::cout << summary.dump(2) << "\n";
  for (const std::string& line : gate_verdict_lines(checks)) std::fprintf(stderr, "ragkv: eval gate: %s\n", line.c_str());
  if (fit_exit) return *fit_exit;
  return gate_passed(checks) ? 0 : 1;
}

}  // namespace

std::unique_ptr<CommandFamily> rag_commands() { return std::make_unique<RagCommands>(); }

}  // namespace ragkv::cli
