// Reuse benchmark: one synthetic RAG prompt of real prose, its chunk caches precomputed into a
// store, each mode's prefill timed per KV tier, every ratio taken against `full` in the same run.
#include "bench/reuse-bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "bench/bench-text.h"
#include "bench/prefill-bench.h"
#include "bench/stats.h"
#include "core/eval/metrics.h"
#include "core/kv/kv-tiers.h"
#include "core/model/generate.h"
#include "core/rag/cache-keys.h"
#include "core/rag/cost-profile.h"
#include "core/rag/loading-controller.h"
#include "core/rag/fusor.h"
#include "core/rag/precompute.h"
#include "core/rag/selection.h"
#include "retrieval/chunker.h"
#include "core/util/enum-names.h"
#include "core/util/error.h"

namespace ragkv {

namespace fs = std::filesystem;

namespace {
constexpr EnumNames<KvStart, 5> kStartNames{{{
    {KvStart::disk, "disk"},
    {KvStart::page_cache, "page-cache"},
    {KvStart::host, "host"},
    {KvStart::device, "device"},
    {KvStart::remote, "remote"},
}}};
}  // namespace

const char* kv_start_name(KvStart t) { return kStartNames.name(t); }
KvStart parse_kv_start(const std::string& s) { return kStartNames.parse(s, "KV tier"); }
std::vector<std::string> kv_start_names() { return kStartNames.names(); }

namespace {

using Clock = std::chrono::steady_clock;

// Chunk i: the passages from i onwards, cycled, cut at the last word boundary that keeps it within
// `tokens` tokens (a binary search over the boundaries: O(log n) encodings).
Chunk bench_chunk(const Tokenizer& tok, int i, int tokens) {
  std::string text;
  for (size_t p = size_t(i); int(tok.encode(text, false).size()) < tokens; ++p) text += kBenchPassages[p % kBenchPassages.size()];
  std::vector<size_t> cuts;
  for (size_t c = 1; c < text.size(); ++c)
    if (text[c] == ' ') cuts.push_back(c);
  size_t lo = 0, hi = cuts.size();  // the answer is cuts[lo - 1] (or the first word if lo stays 0)
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (int(tok.encode(text.substr(0, cuts[mid]), false).size()) <= tokens) lo = mid + 1;
    else hi = mid;
  }
  Chunk c;
  c.id = fmt::format("bench#{}", i);
  c.doc = "bench";
  c.title = fmt::format("Passage {}", i + 1);
  c.text = text.substr(0, lo > 0 ? cuts[lo - 1] : (cuts.empty() ? text.size() : cuts[0]));
  c.n_tokens = int(tok.encode(c.text, false).size());
  return c;
}

// A temporary store directory, removed with its contents at scope end.
struct ScratchStore {
  fs::path path;
  bool owned = false;
  explicit ScratchStore(const std::string& dir) {
    if (!dir.empty()) {
      path = dir;
      return;
    }
    path = fs::temp_directory_path() / fmt::format("ragkv-bench-reuse-{}", ::getpid());
    owned = true;
  }
  ~ScratchStore() {
    std::error_code ec;
    if (owned) fs::remove_all(path, ec);
  }
};

struct Timed {
  std::vector<double> prefill_ms, load_ms, wait_ms, prepare_ms, plan_ms;  // prefill_ms: plan + prefill (the TTFT)
  double warmup_prepare_ms = 0;  // rep 0's: where the device tier is filled
  PrefillStats last;
  std::vector<float> logits;
  uint64_t kv_bytes = 0;    // f16 K and V of the cached segments (what the fusor receives)
  uint64_t file_bytes = 0;  // their chunk files' sizes (what a load reads)
  std::optional<LoadControl> control;  // the last rep's loading-controller decisions
};

}  // namespace

nlohmann::json bench_reuse(Backend& backend, const ReuseBenchOptions& opt) {
  if (opt.chunks < 1 || opt.chunk_tokens < 1 || opt.repetitions < 1) fail("bench reuse: chunks, chunk tokens and repetitions must be ≥ 1");
  Model model(opt.model_path, backend);
  const PromptFormat format(model);
  const CacheKeys keys(model, format);
  const int L = model.config().n_layer;
  BlendParams blend = opt.blend;
  blend.selection = default_selection(model.config());  // a mode naming /METHOD overrides it

  std::vector<Chunk> chunks;
  for (int i = 0; i < opt.chunks; ++i) chunks.push_back(bench_chunk(model.tokenizer(), i, opt.chunk_tokens));
  std::vector<const Chunk*> chunk_ptrs;
  for (const Chunk& c : chunks) chunk_ptrs.push_back(&c);
  const RagPrompt prompt = format.build(chunk_ptrs, kBenchQuestion);
  if (prompt.n_tokens() + 1 > model.config().n_ctx_train)
    fail("bench reuse: the prompt ({} tokens: {} chunks of {}) exceeds the model's context of {} tokens; "
         "lower --chunks or --chunk-tokens", prompt.n_tokens(), opt.chunks, opt.chunk_tokens, model.config().n_ctx_train);

  if (opt.kv_bits.empty()) fail("bench reuse: no KV encoding (--kv-bits)");
  const ScratchStore scratch(opt.store_dir);
  const bool wants_remote = std::find(opt.tiers.begin(), opt.tiers.end(), KvStart::remote) != opt.tiers.end();
  if (wants_remote && opt.remote.empty()) fail("bench reuse --tiers remote: name the server with --remote redis://host[:port]");
  const auto remote = opt.remote.empty() ? nullptr : std::make_shared<RedisTier>(opt.remote);
  std::vector<KvStore> stores;  // one per encoding, in opt.kv_bits's order
  nlohmann::json store_rows = nlohmann::json::array();
  PrecomputeStats pc;
  for (int bits : opt.kv_bits) {
    KvStoreInfo info = keys.store_info();
    info.dtype = KvEncoding::from_bits(bits).name();
    const fs::path dir = opt.kv_bits.size() == 1 ? scratch.path : scratch.path / info.dtype;
    stores.push_back(KvStore::open_for_write(dir, info));
    if (remote) stores.back().set_remote(remote);  // precompute writes through
    std::fprintf(stderr, "ragkv bench reuse: %d chunks, prompt of %lld tokens; precomputing the chunk caches into %s\n",
                 opt.chunks, (long long)prompt.n_tokens(), dir.c_str());
    const PrecomputeStats st = precompute_chunks(model, format, stores.back(), chunk_ptrs);
    if (stores.size() == 1) pc = st;
    store_rows.push_back({{"kv_dtype", info.dtype},
                          {"precompute_s", st.seconds},
                          {"store_bytes", stores.back().usage().second},
                          {"kv_bytes_per_token", kv_bytes_per_token(info.encoding(), uint32_t(L),
                                                                    uint32_t(model.config().kv_dim()))}});
  }
  std::vector<ChunkKvMeta> cached_keys;  // every segment but the question
  for (size_t s = 0; s + 1 < prompt.segments.size(); ++s) cached_keys.push_back(keys.segment(prompt.segments[s]));

  std::unique_ptr<LoadingController> controller;
  if (opt.load_control) {
    const MachineProfile m =
        load_or_profile_machine(opt.cost_profile, model, keys.model_fingerprint(), &stores.front());
    controller = std::make_unique<LoadingController>(m.tiers, m.prefill, L);
  }

  KvCache kv = model.new_kv_cache(prompt.n_tokens() + 1);
  Workspace ws;
  auto run = [&](const KvStore& store, const ModeSpec& spec, KvStart start) {
    const ReuseMode mode = spec.mode;
    backend.set_profile_section(mode == ReuseMode::full ? spec.name()
                                                         : spec.name() + "/" + kv_start_name(start) + "/" +
                                                               store.info().dtype);
    const BlendParams bp = spec.blend(blend);
    Timed t;
    KvTiers tiers(store);  // the memory tiers of this run: filled below, dropped at its end
    for (int rep = 0; rep <= opt.repetitions; ++rep) {  // rep 0 is the warm-up
      const auto t_prep = Clock::now();
      for (const ChunkKvMeta& key : cached_keys) {
        if (start == KvStart::host) {  // read and verified into host memory before every prefill
          tiers.drop(key);
          tiers.place(key, KvTier::host, &backend);  // pinned for direct uploads, as answer's tiers do
        }
        if (start == KvStart::device) tiers.place(key, KvTier::device, &backend);  // once, at the warm-up
        if (start == KvStart::remote) {  // only the remote tier holds it: planning fetches it
          tiers.drop(key);
          std::error_code ec;
          fs::remove(store.chunk_path(key), ec);
        }
      }
      const auto t_plan = Clock::now();
      PrefillPlan plan = plan_prefill(prompt, mode, bp, L, tier_lookup(keys, &tiers));
      if (controller && mode != ReuseMode::full) {  // as answer: decided and carried out in the planning time
        const PlanLoad pl = plan_load(*controller, prompt, plan);
        t.control = controller->decide(pl.cached, pl.base_compute_ms, plan.blend.recompute_ratio, pl.pipelined);
        apply_load_control(*t.control, plan, bp.preload_depth);
      }
      const double plan_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_plan).count();
      if (plan.counts.misses + plan.counts.bad > 0)
        fail("bench reuse: {} chunk caches missing or bad in {}", plan.counts.misses + plan.counts.bad, store.dir().string());
      t.kv_bytes = t.file_bytes = 0;
      for (const SegmentPlan& s : plan.segments) {
        if (!s.kv) continue;
        t.kv_bytes += s.kv->bytes();
        if (const auto f = file_stamp(store.chunk_path(s.kv->meta()))) t.file_bytes += f->size;
        if (start == KvStart::disk) static_cast<const DiskSegmentKv&>(*s.kv).reader().evict_page_cache();
      }
      const double prep_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_prep).count();
      kv.n_used = 0;
      PrefillResult r = prefill_prompt(model, prompt, plan, kv, ws);
      if (rep == 0) {
        t.warmup_prepare_ms = prep_ms;
        continue;
      }
      t.prefill_ms.push_back(plan_ms + r.stats.prefill_ms);
      t.plan_ms.push_back(plan_ms);
      t.load_ms.push_back(r.stats.load_ms);
      t.wait_ms.push_back(r.stats.load_wait_ms);
      t.prepare_ms.push_back(prep_ms);
      t.last = r.stats;
      t.logits = std::move(r.logits);
    }
    return t;
  };

  const Timed full = run(stores.front(), ModeSpec(ReuseMode::full), KvStart::page_cache);
  const double full_median = median_of(full.prefill_ms);
  nlohmann::json results = nlohmann::json::array();
  for (const ModeSpec& spec : opt.modes) {
    const ReuseMode mode = spec.mode;
    const bool cached = mode != ReuseMode::full;
    std::vector<std::pair<const KvStore*, KvStart>> places;  // every store (encoding) in every tier
    for (const KvStore& s : stores)
      for (KvStart tier : opt.tiers) places.emplace_back(&s, tier);
    for (const auto& [store_in, tier] : places) {
      const KvStore& store = *store_in;
      const Timed t = mode == ReuseMode::full ? full : run(store, spec, tier);
      const double best = *std::min_element(t.prefill_ms.begin(), t.prefill_ms.end()), median = median_of(t.prefill_ms);
      nlohmann::json row = {
          {"mode", spec.name()},
          {"kv_tier", cached ? kv_start_name(tier) : "none"},
          {"ttft_ms_best", best},
          {"ttft_ms_median", median},
          {"ttft_ratio_vs_full", median / full_median},
          {"compute_fraction", t.last.compute_fraction()},
          {"reused_recompute_fraction", t.last.reused_recompute_fraction()},
          {"plan_ms_median", median_of(t.plan_ms)},
          {"load_ms_median", median_of(t.load_ms)},
          {"load_wait_ms_median", median_of(t.wait_ms)},
          {"kv_bytes_loaded", cached ? t.kv_bytes : 0},
          {"kv_file_bytes", cached ? t.file_bytes : 0},
          {"first_token_matches_full", argmax(t.logits) == argmax(full.logits)},
          // prefix is computed as full over its rows: bit-identical where the kernels' results do
          // not depend on how many rows a call has (issue 40: say which).
          {"first_logits_identical_to_full", t.logits == full.logits},
          {"kl_first_token_vs_full", kl_divergence_logits(full.logits, t.logits)},
      };
      // Filling the host or device tier happens before the prefill, outside the TTFT (rep 0 fills
      // the device tier; the timed reps reuse it).
      if (tier == KvStart::host && cached) row["host_fill_ms_median"] = median_of(t.prepare_ms);
      if (tier == KvStart::device && cached) row["device_fill_ms"] = t.warmup_prepare_ms;
      if (cached) row["kv_dtype"] = store.info().dtype;
      if (tier == KvStart::remote && cached) row["remote"] = remote->stats().to_json();  // cumulative over the run
      if (t.control) {
        row["load_control"] = {{"recomputed_segments", t.control->recomputed()},
                               {"segments", t.control->segments.size()},
                               {"preload_depth", t.control->preload_depth}};
      }
      if (mode == ReuseMode::full)
        row["prefill_tflops"] = prefill_flops(model.config(), prompt.n_tokens()) / (median / 1000.0) / 1e12;
      results.push_back(std::move(row));
      std::fprintf(stderr, "ragkv bench reuse: %s%s%s%s%s: median %.1f ms (%.3f × full)\n", spec.name().c_str(),
                   cached ? " / " : "", cached ? kv_start_name(tier) : "", cached ? " / " : "",
                   cached ? store.info().dtype.c_str() : "", median, median / full_median);
      if (!cached) break;  // full reads no cache: one row
    }
  }
  return {
      {"bench", "reuse"},
      {"model", opt.model_path},
      {"arch", model.config().arch_name},
      {"device", backend.name()},
      {"kernels", backend.kernels()},
      {"threads", opt.threads},
      {"chunks", opt.chunks},
      {"chunk_tokens", opt.chunk_tokens},
      {"prompt_tokens", prompt.n_tokens()},
      {"recompute_ratio", opt.blend.recompute_ratio},
      {"selection", selection_name(blend.selection)},
      {"check_layers", opt.blend.check_layers},
      {"repetitions", opt.repetitions},
      {"load_control", opt.load_control},
      {"precompute_s", pc.seconds},
      {"store_bytes", stores.front().usage().second},
      {"stores", store_rows},
      {"results", results},
  };
}

}  // namespace ragkv
