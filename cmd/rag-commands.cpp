// precompute, answer and eval: their flags, turned into the options of core/rag's answer run and
// core/eval's eval run, and the runs' results turned into output.

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cmd/command-family.h"
#include "cmd/flag-table.h"
#include "core/eval/answer-scoring.h"
#include "core/eval/eval-run.h"
#include "core/kv/claim-set.h"
#include "core/format/checksum.h"
#include "core/kv/store-key.h"
#include "core/kv/variant-ledger.h"
#include "core/model/embedder.h"
#include "core/model/model.h"
#include "core/rag/answer-run.h"
#include "core/rag/cache-keys.h"
#include "core/rag/donor-reuse.h"
#include "core/rag/mode-spec.h"
#include "core/rag/precompute-selection.h"
#include "core/rag/precompute.h"
#include "core/util/shard.h"
#include "core/rag/queries.h"
#include "core/rag/rag-engine.h"
#include "core/rag/answer-resume.h"
#include "core/rag/shard-merge.h"
#include "core/rag/variant-compute.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/line-writer.h"
#include "core/util/progress.h"
#include "retrieval/index-dir.h"

namespace ragkv::cli {

using nlohmann::json;

namespace {

class RagCommands : public CommandFamily {
 public:
  explicit RagCommands(CliOptions& o) : o_(o) {}
  void add_to(CLI::App& app) override;
  bool selected() const override { return *precompute_ || *answer_ || *eval_ || *merge_; }
  int run() override;

 private:
  QueryFile load_query_file(const char* command) const;
  int run_merge();
  RagEngineOptions engine_options(bool need_store) const;
  AnswerRunOptions answer_options(const RagEngine& engine, const std::string& load_control) const;
  EvalRunOptions eval_options() const;
  KvStore open_store(const CacheKeys& keys) const;
  std::vector<const Chunk*> precompute_selection(const IndexDir& index, const ContextRetriever& retriever,
                                                 const std::optional<QueryFile>& qf, const Shard& shard,
                                                 const KvStore& store, const CacheKeys& keys,
                                                 const PromptFormat& format) const;
  std::pair<VariantComputeStats, const char*> precompute_variant_caches(
      const Model& model, const PromptFormat& format, const KvStore& store, const IndexDir& index,
      const ContextRetriever& retriever, const std::vector<const Chunk*>& chunks,
      const std::optional<QueryFile>& warmup, const Shard& shard, ClaimSet& claims) const;
  int run_precompute();
  int run_answer();
  int run_eval();

  CliOptions& o_;
  CLI::App *precompute_ = nullptr, *answer_ = nullptr, *eval_ = nullptr, *merge_ = nullptr;
};

void RagCommands::add_to(CLI::App& app) {
  precompute_ = app.add_subcommand("precompute", "Compute the KV caches of an index's chunks into a store");
  add_flags(precompute_, kPrecompute, o_);
  answer_ = app.add_subcommand("answer", "Answer a query file with retrieval and chunk-KV reuse");
  add_flags(answer_, kAnswer, o_);
  eval_ = app.add_subcommand("eval", "Quality gate: each mode against a baseline on the same chunks");
  add_flags(eval_, kEval, o_);
  merge_ = app.add_subcommand("merge", "Join the answer or eval record files of a sharded run, in the query file's order");
  add_flags(merge_, kMerge, o_);
}

int RagCommands::run() {
  if (*precompute_) return run_precompute();
  if (*answer_) return run_answer();
  if (*merge_) return run_merge();
  return run_eval();
}

// The query file, cut to --limit; its skipped lines reported.
QueryFile RagCommands::load_query_file(const char* command) const {
  QueryFile qf = load_queries(o_.queries, parse_on_error(o_.on_error));
  for (const auto& p : qf.skipped) std::fprintf(stderr, "ragkv: skipped %s\n", p.message.c_str());
  if (o_.limit > 0 && qf.queries.size() > o_.limit) qf.queries.resize(o_.limit);
  // Many processes (a job array): this one's queries — by line, a conversation's turns together.
  const Shard shard = resolve_shard(o_.shard, o_.shard_count);
  if (shard.sharded()) {
    const size_t all = qf.queries.size();
    std::vector<Query> mine;
    for (size_t i = 0; i < all; ++i) {
      const Query& q = qf.queries[i];
      if (shard.owns(q.conversation.empty() ? uint64_t(i) : checksum64(q.conversation))) mine.push_back(q);
    }
    qf.queries = std::move(mine);
    std::fprintf(stderr, "%s: shard %s (%s): %zu of the %zu queries; `ragkv merge` joins the shards' files\n", command,
                 shard.name().c_str(), shard.source.c_str(), qf.queries.size(), all);
  }
  return qf;
}

int RagCommands::run_merge() {
  const QueryFile qf = load_queries(o_.queries, OnError::fail);
  const MergedRecords m = merge_shard_records(qf, o_.queries, o_.shard_files);
  LineWriter out(o_.out);
  for (const std::string& line : m.lines) out.line(line);
  out.close();
  std::fprintf(stderr, "ragkv: merge: %zu records from %zu shard files, in the order of %s\n", m.lines.size(), m.shards,
               o_.queries.c_str());
  return 0;
}

RagEngineOptions RagCommands::engine_options(bool need_store) const {
  RagEngineOptions eo;
  eo.index = o_.index;
  eo.store = o_.store;
  eo.model = o_.model;
  eo.embedder = o_.embedder;
  eo.top_k = o_.top_k;
  eo.need_store = need_store;
  eo.store_key = o_.store_key;
  eo.read_only = o_.read_only;
  eo.remote = o_.remote;
  if (o_.read_only) {  // a store mounted read-only: nothing that writes it
    if (o_.write_back) fail("--read-only with --write-back: write-back stores variants; drop one of them");
    if (o_.cache.disk_bytes.value_or(0) > 0) fail("--read-only with --disk-budget: the disk tier writes chain nodes; drop one of them");
    if (o_.fit_alpha) fail("--read-only with --fit-alpha: the fitted alpha is written to the store; drop one of them");
    if (o_.fit_fallback) fail("--read-only with --fit-fallback: the fitted rule is written to the store; drop one of them");
    if (!o_.remote.empty()) fail("--read-only with --remote: the remote tier's caches are installed in the local store; drop one of them");
  }
  return eo;
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
              {"taken_over", st.taken_over}, {"tokens", st.tokens}, {"token_layers", st.token_layers},
              {"from_donor", st.from_donor}, {"donor_shared_tokens", st.donor_shared_tokens},
              {"donor_repaired_tokens", st.donor_repaired_tokens},
              {"seconds", st.seconds}, {"tokens_per_s", st.seconds > 0 ? double(st.tokens) / st.seconds : 0.0},
              {"bytes_written", st.bytes_written + vs.bytes_written}, {"kv_bytes_per_token", bytes_per_token},
              {"kv_dtype", encoding.name()},
              {"variants", {{"source", source}, {"computed", vs.computed}, {"skipped", vs.skipped},
                            {"claimed_by_other", vs.claimed_by_other}, {"taken_over", vs.taken_over}, {"tokens", vs.tokens},
                            {"over_budget", vs.over_budget}, {"evicted", vs.evicted}, {"seconds", vs.seconds}}},
              {"store_files", files}, {"store_bytes", bytes}};
}

// The store precompute fills: a new one in the --kv-bits encoding (default f16), an existing one in
// its own; --max-variants and --variant-bytes recorded in its craft.json for later runs.
KvStore RagCommands::open_store(const CacheKeys& keys) const {
  KvStoreInfo store_info = keys.store_info();
  if (o_.kv_bits.size() > 1) fail("precompute --kv-bits takes one encoding, not {}", o_.kv_bits.size());
  store_info.dtype = o_.kv_bits.empty() ? "" : KvEncoding::from_bits(o_.kv_bits[0]).name();  // "": the store's, else f16
  KvStore store = KvStore::open_for_write(o_.store, store_info);
  store.set_key(StoreKey::load_if_given(o_.store_key));
  if (!o_.remote.empty()) store.set_remote(std::make_shared<RedisTier>(o_.remote));
  if (o_.max_variants || o_.variant_bytes) {
    CraftStoreSettings cs = read_craft_settings(store);
    if (o_.max_variants) cs.budget.max_variants = *o_.max_variants;
    if (o_.variant_bytes) cs.budget.max_bytes = *o_.variant_bytes;
    write_craft_settings(store, cs);
  }
  return store;
}

// The chunks precompute computes: every chunk, or those the queries use (first use order), then
// --limit; with many processes (a job array), this one's by content key, never another shard's.
std::vector<const Chunk*> RagCommands::precompute_selection(const IndexDir& index, const ContextRetriever& retriever,
                                                            const std::optional<QueryFile>& qf, const Shard& shard,
                                                            const KvStore& store, const CacheKeys& keys,
                                                            const PromptFormat& format) const {
  std::vector<const Chunk*> chunks;
  if (qf)
    chunks = chunks_used_by(retriever, qf->queries);
  else
    for (const Chunk& c : index.chunks()) chunks.push_back(&c);
  if (o_.limit > 0 && chunks.size() > o_.limit) chunks.resize(o_.limit);
  const size_t selected = chunks.size();
  if (shard.sharded()) {
    std::erase_if(chunks, [&](const Chunk* c) {
      return !shard.owns(checksum64(store.chunk_path(keys.chunk(c->id, format.chunk_ids(*c))).filename().string()));
    });
    std::fprintf(stderr, "precompute: shard %s (%s): %zu of the %zu chunks selected\n", shard.name().c_str(),
                 shard.source.c_str(), chunks.size(), selected);
  }
  return chunks;
}

// Cache-Craft variants (DESIGN.md §4): the warm-up queries' prompts, or each selected chunk after
// its nearest neighbours in the index (neighbour sequences end in this shard's chunks; warm-up
// sequences are shared out by position). Returns the stats and where the sequences came from.
std::pair<VariantComputeStats, const char*> RagCommands::precompute_variant_caches(
    const Model& model, const PromptFormat& format, const KvStore& store, const IndexDir& index,
    const ContextRetriever& retriever, const std::vector<const Chunk*>& chunks, const std::optional<QueryFile>& warmup,
    const Shard& shard, ClaimSet& claims) const {
  auto sequences = warmup ? warmup_sequences(retriever, warmup->queries) : neighbour_sequences(index, chunks, o_.neighbours);
  if (warmup && shard.sharded())
    for (size_t i = sequences.size(); i-- > 0;)
      if (i % shard.count != shard.index) sequences.erase(sequences.begin() + std::ptrdiff_t(i));
  std::optional<Progress> vbar;
  VariantLedger ledger(store);
  const VariantComputeStats vs = precompute_variants(model, format, store, sequences, !warmup, &ledger, [&](size_t done, size_t total) {
    if (!vbar) vbar.emplace(warmup ? "precompute: warm-up variants" : "precompute: neighbour variants", int64_t(total), "variants");
    vbar->set(int64_t(done));
  }, &claims);
  if (vbar) vbar->finish();
  return {vs, warmup ? "warmup" : sequences.empty() ? "none" : "neighbours"};
}

int RagCommands::run_precompute() {
  auto backend = o_.dev.make_backend();
  std::optional<QueryFile> qf, warmup;
  if (!o_.queries.empty()) qf = load_queries(o_.queries, OnError::fail);
  if (!o_.warmup.empty()) warmup = load_queries(o_.warmup, OnError::fail);
  auto searches = [](const std::optional<QueryFile>& f) {
    return f && std::any_of(f->queries.begin(), f->queries.end(), [](const Query& q) { return q.passages.empty(); });
  };
  std::unique_ptr<Embedder> embedder;
  if (searches(qf) || searches(warmup)) {
    embedder = std::make_unique<Embedder>();
    embedder->load(o_.embedder, *backend);
  }
  const IndexDir index = IndexDir::open(o_.index, embedder ? embedder->fingerprint() : "");
  Model model(o_.model, *backend);
  warn_if_other_tokenizer(index, model);
  const PromptFormat format(model);
  const CacheKeys keys(model, format);
  const KvStore store = open_store(keys);

  const ContextRetriever retriever(index, embedder.get(), o_.top_k);
  const Shard shard = resolve_shard(o_.shard, o_.shard_count);
  const std::vector<const Chunk*> chunks = precompute_selection(index, retriever, qf, shard, store, keys, format);

  // Edited chunks (after build-index --update): built from the previous generation's caches.
  std::vector<Chunk> previous_chunks;
  std::optional<DonorFinder> donors;
  if (o_.donor_reuse == "on")
    if (std::vector<Chunk> previous = index.previous_chunks(); !previous.empty()) {
      previous_chunks = std::move(previous);
      donors.emplace(format, keys, store, previous_chunks, DonorParams{o_.donor_repair});
    }

  // Other processes sharing the store skip what this one claims, and the other way round.
  ClaimSet claims(o_.claim_lease);
  std::optional<Progress> bar;  // made once the chunks left to compute are known
  const PrecomputeStats st = precompute_chunks(model, format, store, chunks, [&](size_t done, size_t total) {
    if (!bar) {
      if (chunks.size() > total)
        std::fprintf(stderr, "precompute: %zu of %zu chunks already stored\n", chunks.size() - total, chunks.size());
      bar.emplace("precompute", int64_t(total), "chunks");
    }
    bar->set(int64_t(done));
  }, &claims, donors ? &*donors : nullptr);
  if (bar) bar->finish();

  const auto [vs, variant_source] = precompute_variant_caches(model, format, store, index, retriever, chunks, warmup, shard, claims);
  json summary = precompute_summary(store, o_.store, model, keys, chunks.size(), st, vs, variant_source);
  if (shard.sharded()) summary["shard"] = {{"index", shard.index}, {"count", shard.count}, {"from", shard.source}};
  if (store.remote()) summary["remote"] = store.remote()->stats().to_json();
  summary["donors"] = {{"reuse", o_.donor_reuse}, {"repair", o_.donor_repair}, {"previous_chunks", previous_chunks.size()}};
  std::cout << summary.dump() << "\n";
  return 0;
}

// load_control: --load-control with auto resolved for the backend (CacheFlags::load_control_for).
AnswerRunOptions RagCommands::answer_options(const RagEngine& engine, const std::string& load_control) const {
  AnswerRunOptions o;
  o.mode = !o_.mode.empty() ? parse_mode_spec(o_.mode) : ModeSpec(engine.has_store() ? ReuseMode::auto_ : ReuseMode::full);
  if (!o_.compare.empty()) {
    o.compare = parse_mode_spec(o_.compare);
    if (o.compare->freq_order) fail("--compare {}: the comparison answers over the same chunks, in the same order; drop '+freq'", o_.compare);
  }
  o.defaults = o_.defaults;
  o.sampling = o_.sampling;
  o.sampling.seed = o_.seed.value_or(0);
  o.on_error = parse_on_error(o_.on_error);
  o.batch = o_.batch;
  o.write_back = o_.write_back;
  o.reorder = !o_.no_reorder;
  o.reorder_window = o_.reorder_window;
  o.dedup = !o_.no_dedup;
  o.freq_order = o.mode.freq_order;  // MODE+freq: CRAFT's frequency order of each prompt's chunks
  o.ca_window = o_.ca_window;
  o.promotion_threshold = o_.promotion_threshold;
  o.pipeline = o_.pipeline;
  o.search_slice = o_.search_slice;
  o.apply_load_control = load_control == "on";
  o.raise_ratio = o_.cache.raise_ratio;
  o.require_exact = o_.require == "exact";
  o.fallback = !o_.fallback_margin.empty()       ? parse_fallback_rule(o_.fallback_margin)
               : o.mode.mode == ReuseMode::auto_ ? engine.auto_fallback()
                                                 : FallbackRule{};
  return o;
}

int RagCommands::run_answer() {
  QueryFile qf = load_query_file("answer");
  if (o_.resume && o_.out.empty()) fail("--resume needs --out FILE (the answers to resume from)");
  auto backend = o_.dev.make_backend();
  RagEngineOptions eo = engine_options(false);
  eo.tiers = o_.cache.config(*backend);
  const std::string load_control = o_.cache.load_control_for(*backend);
  eo.load_control = load_control;
  eo.cost_profile = o_.cache.cost_profile;
  RagEngine engine(eo, qf.queries, *backend);
  const AnswerRunOptions o = answer_options(engine, load_control);
  if (o_.cache.load_control != "off" && o_.cache.load_control != "auto" && !engine.load_controller())
    std::fprintf(stderr, "ragkv: answer: --load-control %s: no store of this model, nothing is loaded\n",
                 o_.cache.load_control.c_str());
  // --resume: keep what an earlier run of this command wrote, answer the rest.
  ResumedAnswers resumed;
  if (o_.resume) {
    std::set<std::string> ids;
    for (const Query& q : qf.queries) ids.insert(q.id);
    resumed = read_answer_records(o_.out, o.mode.name(), ids);
    qf.queries = queries_left(qf.queries, resumed);
    if (!resumed.from.empty())
      std::fprintf(stderr, "ragkv: answer: resuming with %zu answered queries from %s%s; %zu left\n", resumed.lines.size(),
                   resumed.from.c_str(), resumed.dropped_partial_line ? " (its unfinished last line dropped)" : "",
                   qf.queries.size());
    if (qf.queries.empty()) {
      LineWriter done(o_.out, resumed.lines);
      done.close();
      return 0;
    }
  }
  LineWriter out(o_.out, resumed.lines);
  AnswerScoring scoring;
  AnswerRunResult r = run_answers(engine, qf, o, [&](AnsweredQuery& a) { scoring.score(a); },
                                  [&](const std::string& line) { out.line(line); });
  out.close();
  r.summary.update(scoring.summary());
  std::fprintf(stderr, "ragkv: answer summary: %s\n", r.summary.dump().c_str());
  if (!o_.summary.empty()) write_file_atomic(o_.summary, {r.summary.dump(2) + "\n"});
  if (r.bad_reads > 0)  // never silent: name the store and the command that rewrites the bad files
    std::fprintf(stderr,
                 "ragkv: warning: %s: %.0f chunk-cache reads failed their checks and were recomputed; `ragkv store repair "
                 "--store %s --index %s` (or the next precompute) rewrites the bad files\n",
                 o_.store.c_str(), r.bad_reads, o_.store.c_str(), o_.index.c_str());
  if (r.answered == 0 && r.skipped > 0)
    fail("{}: every query was skipped ({} of {}, and {} bad lines): nothing was answered", o_.queries, r.skipped,
         qf.queries.size(), qf.skipped.size());
  return 0;
}

EvalRunOptions RagCommands::eval_options() const {
  EvalRunOptions o;
  o.modes = o_.modes.empty() ? std::vector<std::string>{"blend"} : o_.modes;
  o.baseline = o_.baseline;
  o.sweep = o_.sweep;
  for (const std::string& m : o_.fallback_margins) o.fallback_margins.push_back(parse_fallback_rule(m));
  o.defaults = o_.defaults;
  o.top_k = o_.top_k;
  o.gate = o_.gate;
  o.on_error = parse_on_error(o_.on_error);
  o.batch = o_.batch;
  o.answers = o_.answers;
  o.resume = o_.resume;
  o.baseline_cache = o_.baseline_cache;
  o.report = o_.report;
  o.junit = o_.junit;
  o.fit_alpha = o_.fit_alpha;
  o.fit_fallback = o_.fit_fallback;
  o.queries_path = o_.queries;
  o.store_path = o_.store;
  return o;
}

int RagCommands::run_eval() {
  if (o_.resume && o_.answers.empty()) fail("--resume needs --answers FILE (the records to resume from)");
  const QueryFile qf = load_query_file("eval");
  auto backend = o_.dev.make_backend();
  RagEngine engine(engine_options(true), qf.queries, *backend);
  const EvalRunResult r = ragkv::run_eval(engine, qf, eval_options());
  if (r.exit_code == 2) return 2;
  std::cout << r.summary.dump(2) << "\n";
  for (const std::string& line : gate_verdict_lines(r.checks)) std::fprintf(stderr, "ragkv: eval gate: %s\n", line.c_str());
  return r.exit_code;
}

}  // namespace

std::unique_ptr<CommandFamily> rag_commands(CliOptions& o) { return std::make_unique<RagCommands>(o); }

}  // namespace ragkv::cli
