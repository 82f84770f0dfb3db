// store verify, repair, stats and gc: a store's files read the way answer reads them, a
// report, and an exit code; repair removes what fails and, given the index, computes it again; gc
// shrinks the store to a byte budget by its eviction policy (core/kv/store-gc.h).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "cmd/command-family.h"
#include "cmd/flag-table.h"
#include "core/kv/store-check.h"
#include "core/kv/store-gc.h"
#include "core/kv/store-key.h"
#include "core/model/model.h"
#include "core/model/tokenizer.h"
#include "core/rag/cache-keys.h"
#include "core/rag/precompute.h"
#include "core/rag/prompt.h"
#include "retrieval/index-dir.h"
#include "core/util/error.h"
#include "core/util/paths.h"
#include "core/util/progress.h"

namespace ragkv::cli {

namespace {

using nlohmann::json;

// The report as JSON (stdout): counts, and every bad file with its problem.
json report_json(const std::string& store, const KvStoreInfo& info, const StoreReport& rep) {
  json bad = json::array();
  for (const StoreFileReport& f : rep.files)
    if (!f.problem.empty()) bad.push_back({{"file", "kv/" + f.name}, {"problem", f.problem}});
  return json{{"store", store},
              {"kv_dtype", info.dtype},
              {"files", rep.files.size()},
              {"intact", rep.files.size() - rep.bad()},
              {"bad", bad},
              {"stale_temporaries", rep.stale_temporaries},
              {"claims", rep.claims.size()},
              {"stale_claims", rep.stale_claims},
              {"unknown_files", rep.unknown}};
}

// store stats: files, bytes and chunks per model and per KV encoding, from the headers.
json stats_json(const std::string& dir, const KvStore& store, const StoreReport& rep) {
  struct Counts {
    size_t chunks = 0, variants = 0, prefixes = 0;
    uint64_t bytes = 0;
  };
  struct Encoded {  // files of one KV encoding: their bytes per token stored
    size_t files = 0;
    uint64_t bytes = 0, tokens = 0;
  };
  std::map<std::string, Counts> per_model;
  std::map<std::string, Encoded> per_dtype;
  size_t unreadable = 0;
  uint64_t bytes = 0;
  for (const StoreFileReport& f : rep.files) {
    bytes += f.bytes;
    if (f.model_fingerprint.empty()) {
      ++unreadable;
      continue;
    }
    Counts& c = per_model[f.model_fingerprint];
    c.bytes += f.bytes;
    if (f.prefix) ++c.prefixes;
    else if (f.variant) ++c.variants;
    else ++c.chunks;
    Encoded& e = per_dtype[f.dtype];
    ++e.files;
    e.bytes += f.bytes;
    e.tokens += f.n_tokens;
  }
  json models = json::object();
  for (const auto& [fp, c] : per_model)
    models[fp] = {{"chunks", c.chunks}, {"variants", c.variants}, {"prefixes", c.prefixes}, {"bytes", c.bytes}};
  json dtypes = json::object();
  uint64_t tokens = 0, read_bytes = 0;
  for (const auto& [dtype, e] : per_dtype) {
    dtypes[dtype] = {{"files", e.files}, {"tokens", e.tokens}, {"bytes", e.bytes},
                     {"bytes_per_token", e.tokens ? double(e.bytes) / double(e.tokens) : 0.0}};
    tokens += e.tokens;
    read_bytes += e.bytes;
  }
  const KvStoreInfo& info = store.info();
  return {{"store", dir},
          {"model", info.model_name},
          {"model_fingerprint", info.model_fingerprint},
          {"kv_dtype", info.dtype},
          {"kv_bits", info.encoding().bits},
          // the encoding's rate for a long chunk of the store's shape; bytes_per_token:
          // what the readable files hold per token, headers and checksums included
          {"kv_bytes_per_token", kv_bytes_per_token(info.encoding(), info.n_layer, info.n_kv_head * info.head_dim)},
          {"bytes_per_token", tokens ? double(read_bytes) / double(tokens) : 0.0},
          {"per_dtype", dtypes},
          {"files", rep.files.size()},
          {"bytes", bytes},
          {"per_model", models},
          {"unreadable_headers", unreadable},
          {"stale_temporaries", rep.stale_temporaries.size()}};
}

class StoreCommands : public CommandFamily {
 public:
  explicit StoreCommands(CliOptions& o) : o_(o) {}

  void add_to(CLI::App& app) override {
    store_ = app.add_subcommand("store", "Inspect and repair a chunk-cache store (STORE_DIR)");
    store_->require_subcommand(1);
    verify_ = store_->add_subcommand("verify", "Read every file and every checksum; exit 1 when any file is bad");
    add_flags(verify_, kStoreVerify, o_);
    repair_ = store_->add_subcommand("repair", "Remove bad files and dead writers' temporaries; with --index, compute the removed chunks again");
    add_flags(repair_, kStoreRepair, o_);
    stats_ = store_->add_subcommand("stats", "Chunks, variants and bytes per model (headers only)");
    add_flags(stats_, kStoreStats, o_);
    gc_ = store_->add_subcommand("gc", "Shrink the store's cache files to --max-bytes (variants by lowest f_r first, never a claimed file), or to the chunks of --keep-index");
    add_flags(gc_, kStoreGc, o_);
  }

  bool selected() const override { return store_->parsed(); }

  int run() override {
    if (*verify_) return run_verify();
    if (*repair_) return run_repair();
    if (*gc_) return run_gc();
    return run_stats();
  }

 private:
  StoreReport verify_all(const KvStore& store, const char* label) {
    std::optional<Progress> bar;
    return inspect_store(store, /*every_layer=*/true, [&](size_t done, size_t total) {
      if (!bar) bar.emplace(label, int64_t(total), "files");
      bar->set(int64_t(done));
    });
  }

  static void print_problems(const StoreReport& rep, const KvStore& store) {
    for (const StoreFileReport& f : rep.files)
      if (!f.problem.empty())
        std::fprintf(stderr, "ragkv: store: %s: %s\n", (store.dir() / "kv" / f.name).c_str(), f.problem.c_str());
  }

  // The store as store.json names its model, with --store-key's key when given.
  KvStore inspected() const {
    KvStore store = open_store_for_inspection(o_.store);
    store.set_key(StoreKey::load_if_given(o_.store_key));
    return store;
  }

  int run_verify() {
    const KvStore store = inspected();
    const StoreReport rep = verify_all(store, "store verify");
    print_problems(rep, store);
    std::cout << report_json(o_.store, store.info(), rep).dump() << "\n";
    if (rep.bad() > 0)
      std::fprintf(stderr, "ragkv: store verify: %zu of %zu files in %s are bad: run `ragkv store repair --store %s`\n",
                   rep.bad(), rep.files.size(), o_.store.c_str(), o_.store.c_str());
    return rep.bad() > 0 ? 1 : 0;
  }

  int run_repair() {
    const KvStore inspect = inspected();
    const StoreReport rep = verify_all(inspect, "store repair: verify");
    print_problems(rep, inspect);
    const size_t removed = remove_bad_files(inspect, rep);
    std::set<std::string> removed_names;
    for (const StoreFileReport& f : rep.files)
      if (!f.problem.empty()) removed_names.insert(f.name);
    json out = report_json(o_.store, inspect.info(), rep);
    out["removed"] = removed;
    if (!o_.index.empty()) {
      // Compute again the index's chunks whose files were removed (and the prefix if it was).
      auto backend = o_.dev.make_backend();
      const IndexDir index = IndexDir::open(o_.index, "");
      Model model(o_.model, *backend);
      const PromptFormat format(model);
      const CacheKeys keys(model, format);
      check_store_model(keys, inspect.info());
      KvStoreInfo info = keys.store_info();
      info.dtype = "";  // the store's own encoding
      KvStore store = KvStore::open_for_write(o_.store, info);
      store.set_key(inspect.key() ? StoreKey::load_if_given(o_.store_key) : nullptr);
      std::vector<const Chunk*> chunks;
      for (const Chunk& c : index.chunks())
        if (removed_names.count(store.chunk_path(keys.chunk(c.id, format.chunk_ids(c))).filename().string()))
          chunks.push_back(&c);
      std::optional<Progress> bar;
      const PrecomputeStats st = precompute_chunks(model, format, store, chunks, [&](size_t done, size_t total) {
        if (!bar) bar.emplace("store repair: compute", int64_t(total), "chunks");
        bar->set(int64_t(done));
      });
      if (bar) bar->finish();
      out["recomputed_chunks"] = st.computed;
    }
    // What is still missing: all of it without --index; with it, the variants (their contexts are
    // precompute's or answer's to choose).
    size_t missing = 0;
    for (const std::string& name : removed_names) missing += !std::filesystem::exists(inspect.dir() / "kv" / name);
    out["still_missing"] = missing;
    if (missing > 0)
      std::fprintf(stderr, "ragkv: store repair: %zu removed files are computed again by the next `ragkv precompute` on %s%s\n",
                   missing, o_.store.c_str(), o_.index.empty() ? " (or by `store repair --index`)" : "");
    std::cout << out.dump() << "\n";
    return 0;
  }

  int run_stats() {
    const KvStore store = open_store_for_inspection(o_.store);
    const StoreReport rep = inspect_store(store, /*every_layer=*/false);
    std::cout << stats_json(o_.store, store, rep).dump() << "\n";
    return 0;
  }

  // --model must be the store's: the cache keys are computed under it.
  void check_store_model(const CacheKeys& keys, const KvStoreInfo& info) const {
    if (keys.model_fingerprint() != info.model_fingerprint)
      fail("{}: the store is for model {} ({}), --model {} is another: pass the store's model", o_.store, info.model_name,
           info.model_fingerprint, o_.model);
  }

  // The stems of every chunk the --keep-index indexes hold, under the store's model.
  std::set<std::string> kept_stems(const KvStore& store) const {
    auto backend = o_.dev.make_backend();
    Model model(o_.model, *backend);
    const PromptFormat format(model);
    const CacheKeys keys(model, format);
    check_store_model(keys, store.info());
    std::set<std::string> stems;
    for (const std::string& dir : o_.keep_index) {
      const IndexDir index = IndexDir::open(dir, "");
      for (const Chunk& c : index.chunks())
        stems.insert(store.chunk_path(keys.chunk(c.id, format.chunk_ids(c))).filename().string().substr(0, 16));
    }
    return stems;
  }

  int run_gc() {
    if (!o_.max_bytes && o_.keep_index.empty()) fail("store gc: give --max-bytes, --keep-index INDEX..., or both");
    const KvStore store = open_store_for_inspection(o_.store);
    GcOptions opt{o_.max_bytes.value_or(UINT64_MAX), o_.include_canonical, o_.dry_run, std::nullopt};
    if (!o_.keep_index.empty()) opt.keep_stems = kept_stems(store);
    const GcResult r = collect_garbage(store, opt);
    json removed = json::array();
    std::map<std::string, uint64_t> by_kind;
    for (const GcCandidate& c : r.removed) {
      json e = {{"file", "kv/" + c.name}, {"kind", gc_kind_name(c.kind)}, {"bytes", c.bytes}};
      if (c.kind == GcKind::variant) e["f_r"] = c.frequency_reuse;
      removed.push_back(std::move(e));
      by_kind[gc_kind_name(c.kind)] += c.bytes;
    }
    std::cout << json{{"store", o_.store},
                      {"max_bytes", o_.max_bytes ? json(*o_.max_bytes) : json(nullptr)},
                      {"keep_index", o_.keep_index},
                      {"removed_unused", r.removed_unused},
                      {"dry_run", o_.dry_run},
                      {"bytes_before", r.bytes_before},
                      {"bytes_after", r.bytes_after},
                      {"budget_met", r.budget_met},
                      {"removed", removed},
                      {"removed_bytes_by_kind", by_kind},
                      {"kept_claimed", r.kept_claimed},
                      {"bytes_without_canonical", r.bytes_without_canonical},
                      {"needs_canonical", r.needs_canonical},
                      {"stale_temporaries_removed", o_.dry_run ? 0 : r.stale_temporaries},
                      {"stale_claims_removed", o_.dry_run ? 0 : r.stale_claims}}
                         .dump()
              << "\n";
    if (r.needs_canonical) {
      std::fprintf(stderr,
                   "ragkv: store gc: %s holds %llu bytes; without its canonical chunk caches it would still hold %llu, "
                   "above --max-bytes %llu: nothing removed for the budget. Pass --include-canonical to remove canonical caches too "
                   "(least recently used first; the next precompute computes them again)\n",
                   o_.store.c_str(), (unsigned long long)r.bytes_before, (unsigned long long)r.bytes_without_canonical,
                   (unsigned long long)opt.max_bytes);
      return 1;
    }
    if (!r.budget_met) {
      std::fprintf(stderr, "ragkv: store gc: %s still holds %llu bytes, above --max-bytes %llu: %zu files are claimed by "
                   "processes computing them (run gc again when they finish)\n",
                   o_.store.c_str(), (unsigned long long)r.bytes_after, (unsigned long long)opt.max_bytes, r.kept_claimed.size());
      return 1;
    }
    return 0;
  }

  CLI::App *store_ = nullptr, *verify_ = nullptr, *repair_ = nullptr, *stats_ = nullptr, *gc_ = nullptr;
  CliOptions& o_;
};

}  // namespace

std::unique_ptr<CommandFamily> store_commands(CliOptions& o) { return std::make_unique<StoreCommands>(o); }

}  // namespace ragkv::cli
