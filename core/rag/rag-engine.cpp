// Opening the engine of a multi-query run, and the answer options a mode spec resolves to.
#include "core/rag/rag-engine.h"

#include <algorithm>
#include <cstdio>

#include "core/model/tokenizer.h"
#include "core/rag/cache-keys.h"
#include "core/rag/cost-profile.h"
#include "core/util/error.h"

namespace ragkv {

void warn_if_other_tokenizer(const IndexDir& index, const Model& model) {
  if (const std::string w = index.tokenizer_mismatch(tokenizer_fingerprint(model.gguf())); !w.empty())
    std::fprintf(stderr, "ragkv: warning: %s\n", w.c_str());
}

RagEngine::RagEngine(const RagEngineOptions& o, const std::vector<Query>& queries, Backend& backend) {
  const bool search = std::any_of(queries.begin(), queries.end(), [](const Query& q) { return q.passages.empty(); });
  if (search) {
    embedder_ = std::make_unique<Embedder>();
    embedder_->load(o.embedder, backend);
  }
  index_ = std::make_unique<IndexDir>(IndexDir::open(o.index, embedder_ ? embedder_->fingerprint() : ""));
  model_ = std::make_unique<Model>(o.model, backend);
  warn_if_other_tokenizer(*index_, *model_);
  format_ = std::make_unique<PromptFormat>(*model_);
  if (o.need_store && o.store.empty()) fail("--store is required");
  if (!o.remote.empty() && o.store.empty())
    fail("--remote {} needs --store: the remote tier fills the local store's kv/, from where caches are loaded", o.remote);
  if (!o.store.empty()) {
    const CacheKeys keys(*model_, *format_);
    store_ = KvStore::open_for_read(o.store, keys.model_fingerprint());
    store_->set_key(StoreKey::load_if_given(o.store_key));
    if (!o.remote.empty()) store_->set_remote(std::make_shared<RedisTier>(o.remote));
    if (store_->foreign()) {  // never a silent miss: name what is not used and how to rebuild it
      const size_t files = store_->usage().first;
      std::fprintf(stderr,
                   "ragkv: warning: %s was built for model %s (%s), not %s%s: its %zu cache files are from another "
                   "model or fingerprint and are not used (every chunk is computed); rebuild with `ragkv precompute` "
                   "into another --store\n",
                   o.store.c_str(), store_->info().model_name.c_str(), store_->info().model_fingerprint.c_str(),
                   keys.model_fingerprint().c_str(),
                   store_->info().model_name == keys.store_info().model_name
                       ? " (the same file name: other weights, or an older ragkv's fingerprint)"
                       : "",
                   files);
    }
    if (o.tiers && !store_->foreign())
      open_managed_tiers(o, backend);
    else
      tiers_ = std::make_unique<KvTiers>(*store_);
    if (!store_->foreign()) {
      craft_settings_ = read_craft_settings(*store_);
      if (!o.read_only) ledger_ = std::make_unique<VariantLedger>(*store_);
    }
  }
  retriever_ = std::make_unique<ContextRetriever>(*index_, embedder_.get(), o.top_k);
  answerer_ = std::make_unique<RagAnswerer>(*model_, *format_, tiers_.get(), ledger_.get());
}

// The knowledge tree with budgets; with the loading controller, PGDSF's T(α, β) grid and the
// tiers' read rates, measured now or read from the cost profile.
void RagEngine::open_managed_tiers(const RagEngineOptions& o, Backend& backend) {
  tiers_ = std::make_unique<KvTiers>(*store_, *o.tiers, backend);
  const std::string fingerprint = CacheKeys(*model_, *format_).model_fingerprint();
  if (o.load_control != "off") {
    const MachineProfile m = load_or_profile_machine(o.cost_profile, *model_, fingerprint, &*store_);
    if (m.measured_prefill || m.measured_tiers)
      std::fprintf(stderr, "ragkv: machine profile measured%s%s\n", o.cost_profile.empty() ? "" : " into ",
                   o.cost_profile.c_str());
    tiers_->cost() = m.prefill;
    load_controller_ = std::make_unique<LoadingController>(m.tiers, m.prefill, model_->config().n_layer);
  } else if (!o.cost_profile.empty()) {
    bool measured = false;
    tiers_->cost() = load_or_profile_prefill_cost(o.cost_profile, *model_, fingerprint, &measured);
    if (measured) std::fprintf(stderr, "ragkv: prefill cost profiled into %s\n", o.cost_profile.c_str());
  }
  if (tiers_->bad_files() > 0)
    std::fprintf(stderr, "ragkv: %zu knowledge-tree files in %s failed their checks: not used\n", tiers_->bad_files(),
                 o.store.c_str());
}

BlendParams RagEngine::blend_defaults(const ModeDefaults& d) const {
  BlendParams b;
  b.recompute_ratio = d.recompute_ratio;
  b.check_layers = d.check_layers;
  b.check_at = d.check_at;
  b.selection = default_selection(model_->config());
  b.sink_tokens = d.sink_tokens;
  return b;
}

double RagEngine::craft_alpha() const { return craft_settings_.alpha.value_or(kDefaultAlpha); }

FallbackRule RagEngine::auto_fallback() const {
  if (craft_settings_.fallback.empty()) return kDefaultAutoFallback;
  try {
    return parse_fallback_rule(craft_settings_.fallback);
  } catch (const Error& e) {
    fail("{}/craft.json: {}", store_->dir().string(), e.what());
  }
}

AnswerOptions RagEngine::options(const ModeDefaults& d, const ModeSpec& spec) const {
  AnswerOptions o;
  o.mode = spec.mode;
  o.blend = spec.blend(blend_defaults(d));
  CraftParams craft;
  craft.alpha = spec.mode == ReuseMode::auto_ ? craft_settings_.alpha.value_or(kDefaultAutoAlpha) : craft_alpha();
  craft.focus_window = d.focus_window;
  o.craft = spec.craft(craft);
  o.gen.max_tokens = d.max_tokens;
  return o;
}

void RagEngine::record_variant_uses(const AnswerRecord& r) {
  if (!ledger_) return;
  for (const CraftChunkRecord& c : r.craft)
    if (c.context_chunks > 0 && !c.variant.empty()) ledger_->record_use(c.variant, c.cfo);
}

}  // namespace ragkv
