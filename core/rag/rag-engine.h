// The engine a multi-query run works through: the model and its prompt format, the index and
// retriever, the chunk-cache store with its tiers, the Cache-Craft settings and ledger, and the
// answerer over them. `answer`, `eval` and the benchmarks open one; it reads no flags.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kv/kv-store.h"
#include "core/kv/kv-tiers.h"
#include "core/kv/store-key.h"
#include "core/kv/variant-ledger.h"
#include "core/model/embedder.h"
#include "core/model/model.h"
#include "core/rag/fallback-rule.h"
#include "core/rag/answer.h"
#include "core/rag/context.h"
#include "core/rag/loading-controller.h"
#include "core/rag/mode-spec.h"
#include "core/rag/prompt.h"
#include "core/rag/queries.h"
#include "core/rag/selection.h"
#include "retrieval/index-dir.h"

namespace ragkv {

// The parameters a mode takes from the command line where its spec names none (core/rag/mode-spec.h):
// blend's ratio where it names no @R. A blend without /METHOD takes the model architecture's
// default method, one without ~P no adaptivity; craft without @ALPHA the store's fitted α, else
// kDefaultAlpha; auto the store's fitted α, else kDefaultAutoAlpha.
struct ModeDefaults {
  double recompute_ratio = kDefaultRecomputeRatio;
  int check_layers = 3;
  std::vector<int> check_at;
  int sink_tokens = 0;
  int focus_window = CraftParams{}.focus_window;
  int max_tokens = 32;
};

struct RagEngineOptions {
  std::string index, store, model, embedder;
  size_t top_k = 5;
  bool need_store = false;  // an Error when `store` is empty
  // Managed tiers (the knowledge tree with budgets, for `answer`); null: the store is read as it is.
  std::optional<KvTierConfig> tiers;
  // With managed tiers: the loading controller's setting ("off", "report", "on") and the file of the
  // measured prefill cost and tier read rates ("" : measured each run).
  std::string load_control = "off";
  std::string cost_profile;
  std::string store_key;  // signed caches (core/kv/store-key.h): the key file; "": none
  bool read_only = false;  // never write the store: no variant-use ledger (write-back and a disk tier are refused by the caller)
  std::string remote;      // a remote tier below the store (core/kv/redis-tier.h): redis://host[:port][/db]; "": none
};

class RagEngine {
 public:
  // Opens everything for `queries` (an embedder only when one of them must be searched); warnings
  // (another tokenizer, a foreign store, bad tree files) go to stderr.
  RagEngine(const RagEngineOptions& o, const std::vector<Query>& queries, Backend& backend);

  Model& model() { return *model_; }
  const PromptFormat& format() const { return *format_; }
  bool has_store() const { return store_.has_value(); }
  KvStore* store() { return store_ ? &*store_ : nullptr; }
  KvTiers* tiers() { return tiers_.get(); }
  ContextRetriever& retriever() { return *retriever_; }
  RagAnswerer& answerer() { return *answerer_; }
  VariantLedger* ledger() { return ledger_.get(); }
  const LoadingController* load_controller() const { return load_controller_.get(); }
  const CraftStoreSettings& craft_settings() const { return craft_settings_; }

  // The blend parameters of a spec that names no method or ratio (the method: the default of the
  // model's architecture).
  BlendParams blend_defaults(const ModeDefaults& d) const;
  // craft's α where the mode names none: the store's fitted one (eval --fit-alpha), else kDefaultAlpha.
  double craft_alpha() const;
  // auto's margin-fallback rule where --fallback-margin is not given: the store's fitted one (eval
  // --fit-fallback), else kDefaultAutoFallback.
  FallbackRule auto_fallback() const;
  AnswerOptions options(const ModeDefaults& d, const ModeSpec& spec) const;
  // Cache-Craft §3.3: each use of a non-canonical variant raises its f_r by 1/CFO.
  void record_variant_uses(const AnswerRecord& r);

 private:
  void open_managed_tiers(const RagEngineOptions& o, Backend& backend);

  std::unique_ptr<Embedder> embedder_;
  std::unique_ptr<IndexDir> index_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PromptFormat> format_;
  std::optional<KvStore> store_;
  std::unique_ptr<KvTiers> tiers_;
  std::unique_ptr<ContextRetriever> retriever_;
  std::unique_ptr<RagAnswerer> answerer_;
  CraftStoreSettings craft_settings_;
  std::unique_ptr<VariantLedger> ledger_;
  std::unique_ptr<LoadingController> load_controller_;
};

// The index's tokenizer fingerprint checked against the model's (a warning on stderr naming both).
void warn_if_other_tokenizer(const IndexDir& index, const Model& model);

}  // namespace ragkv
