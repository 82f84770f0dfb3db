// Answering one question over given chunks in one reuse mode (DESIGN.md §1 `answer`, §4): the
// prompt is laid out (core/rag/prompt.h), planned (core/rag/plan.h: chunk caches looked up in the tiers;
// missing, foreign or corrupt ones are computed in place and counted — never used), prefilled by
// the fusor (core/rag/fusor.h) and answered by greedy decoding.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/kv/kv-tiers.h"
#include "core/kv/variant-ledger.h"
#include "core/model/generate.h"
#include "core/rag/cache-keys.h"
#include "core/rag/fallback-rule.h"
#include "core/rag/fusor.h"
#include "core/rag/loading-controller.h"
#include "core/rag/plan.h"

namespace ragkv {

struct Chunk;

// A conversation turn's prompt KV, kept for the conversation's next turn so that no token of the
// history is computed again (CRAFT §4.3 keeps a conversation's prefix in its CP-Tree; here the
// answer run holds it): every segment of the prompt but the question, as this turn prefilled it,
// at its position. The next prompt repeats those segments at the same positions, then its own.
struct CarriedKv {
  std::vector<PromptSegment> segments;
  std::vector<std::shared_ptr<const SegmentKv>> kv;  // one per segment
  bool composed = false;  // some of it approximates full's KV (AnswerRecord::composed)
  uint64_t bytes() const;
};

struct AnswerOptions {
  ReuseMode mode = ReuseMode::blend;
  BlendParams blend;
  CraftParams craft;
  // Store the chunks this prompt computes (no cache) as variants of their context (Cache-Craft
  // §3.3 write-back; sparse modes, chunks after the first; under the store's variant budget).
  bool write_back = false;
  // Managed tiers (KvTiers with budgets): record what this prompt used and computed exactly, so
  // the knowledge tree keeps, promotes, admits and evicts (RAGCache Algorithm 1). Off for the
  // runs a measurement compares against (answer --compare, eval), which must not warm the cache.
  bool record_in_tiers = false;
  // CRAFT §4.2 (CP-Tree promotion): chunk i of the prompt may enter the tree as a node only when
  // every chunk up to it is marked here; empty: every chunk may.
  std::vector<uint8_t> promote;
  // A conversation's earlier turns this prompt continues (core/rag/prompt.h), each with the chunks it
  // added; the chunks passed with the question are those this turn adds.
  std::vector<PastTurn> history;
  // Sparse modes: the previous turn's KV (null: none). This prompt's leading segments that are
  // that turn's — same kind, tokens and position — reuse it as an exact prefix, never recomputed.
  std::shared_ptr<const CarriedKv> carried;
  // Sparse modes: keep this prompt's KV for the conversation's next turn (AnswerRecord::carried).
  bool carry = false;
  // The loading controller (core/rag/loading-controller.h; CacheBlend §5, Cache-Craft Eq. 16): null:
  // every cache found is loaded and the loader reads blend.preload_depth layers ahead. Else its
  // decisions are made and reported (AnswerRecord::load_control) and, with apply_load_control,
  // carried out: segments it recomputes, the loader's depth max(L_p, blend.preload_depth), and
  // with raise_ratio r = max(r, hidden ratio).
  const LoadingController* load_control = nullptr;
  bool apply_load_control = true;
  bool raise_ratio = false;
  // Never compose (`--require exact`): only exact prefixes are reused, everything after them is
  // computed, whatever the mode (the plan is prefix's): the output is full's.
  bool require_exact = false;
  // The margin fallback (`--fallback-margin M[/C]`, core/rag/fallback-rule.h): a composed prefill
  // near a tie is done again as `prefix` does it (the exact prefix kept, the rest computed); the
  // answer is full's and both prefills count in the compute and the TTFT. Inactive: never.
  FallbackRule fallback;
  GenerateOptions gen;  // max_tokens; stop_at_newline is set by the answerer
};

// How one chunk's KV was obtained in a prompt (an answer record's provenance).
struct ChunkProvenance {
  enum class Source { computed, exact_prefix, canonical, variant, history, donor };
  std::string chunk;
  Source source = Source::computed;
  std::optional<KvTier> tier;         // where a reused cache came from
  std::vector<std::string> context;   // variant: the chunks it was computed after
  std::string donor;                  // donor: the earlier chunk its cache was built from
  int64_t tokens = 0;
  int64_t recomputed_tokens = 0;      // its rows computed on the final pass's last layer
  int64_t recomputed_token_layers = 0;  // its rows' computed layers, every pass
  nlohmann::json to_json() const;
};
const char* provenance_source_name(ChunkProvenance::Source s);

// craft: what was chosen for one chunk of the prompt (Cache-Craft §3.2).
struct CraftChunkRecord {
  std::string chunk;
  size_t context_chunks = 0;  // the chosen variant's context length (0: the canonical cache)
  bool exact = false;         // an exact chain: reused without fixing
  double beta = 0, gamma = 0, cci = 0, cfo = 0;
  int64_t fix_tokens = 0;
  std::string variant;        // the file in the store's kv/ (for its f_r)
};

struct AnswerRecord {
  std::string mode;
  std::string answer;
  std::vector<std::string> chunk_ids;  // in prompt order
  std::vector<int32_t> output_ids;
  std::vector<float> first_logits;     // the first decoding step's logits
  PrefillStats prefill;
  CacheCounts cache;
  std::vector<CraftChunkRecord> craft;  // craft: per cached chunk, in prompt order
  std::optional<LoadControl> load_control;  // the loading controller's decisions, when it ran
  int written_back = 0;                 // variants this answer stored (write-back)
  int write_back_failed = 0;            // variants it could not store (disk full, read-only store)
  std::shared_ptr<const CarriedKv> carried;  // AnswerOptions::carry: this prompt's KV for the next turn
  int64_t carried_tokens = 0;           // rows reused from the previous turn's KV (AnswerOptions::carried)
  std::string write_back_error;         // the first such failure, for the run's one warning
  // Provenance: composed when some KV was reused at another position or after other chunks than
  // full's (or came from a composed turn), so the output approximates full's; exact otherwise.
  bool composed = false;
  std::vector<ChunkProvenance> provenance;  // per chunk, in prompt order
  double first_margin = -1;  // the reused prefill's first-step top-2 probability gap (−1: not measured)
  // prophet's unrepaired first pass moved to another first token by the repair (the fallback's
  // second signal; false where there was no such pass: PrefillStats::first_pass_token < 0).
  bool repair_moved_first_token = false;
  int64_t exact_prefix_tokens = 0;  // the leading rows a fallback keeps (the exact prefix)
  bool fell_back = false;    // the margin fallback recomputed the prompt after its exact prefix
  size_t fallback_kept_segments = 0;  // the leading segments whose caches the fallback kept
  size_t exact_path_chunks = 0;         // chunks reused on the knowledge tree's exact path
  size_t chunk_hits = 0;                // chunks whose KV came from a tier (exact or not; not the prefix)
  size_t chunk_memory_hits = 0;         // of those, from device or host memory
  double retrieval_ms = 0, decode_ms = 0;
  double cache_update_ms = 0;           // recording the prompt in the managed tiers (after prefill)
  // Planning before the prefill: cache lookups, file headers read, variants listed, and values
  // fetched from a remote tier (core/kv/redis-tier.h) — time a user waits for, so part of the TTFT.
  double plan_ms = 0;
  double ttft_ms() const { return retrieval_ms + plan_ms + prefill.prefill_ms; }
  // The metrics object of ANSWERS.jsonl (DESIGN.md §1 "Files").
  nlohmann::json metrics() const;
  nlohmann::json craft_metrics() const;  // craft: per-chunk choices, fix tokens, focus
};

// A prompt prefilled and waiting to be decoded: RagAnswerer::answer is prefill, greedy decoding
// of kv from logits (alone, or beside other prompts in an AnswerBatch), then finish.
struct PrefilledAnswer {
  AnswerRecord record;        // all but the answer, its tokens and its decode time
  KvCache kv;                 // the prompt's rows, with room for gen.max_tokens more
  std::vector<float> logits;  // the last prompt token's (record.first_logits holds a copy)
  GenerateOptions gen;        // the decoding: stops at the answer's line break
};

class RagAnswerer {
 public:
  // tiers may be null (every mode then computes everything, like `full`); ledger (write-back's
  // budget) may be null.
  RagAnswerer(const Model& model, const PromptFormat& format, KvTiers* tiers, VariantLedger* ledger = nullptr);

  AnswerRecord answer(const std::string& question, const std::vector<const Chunk*>& chunks,
                      const AnswerOptions& opt);
  // answer's first part: plan, prefill, write-back and (record_in_tiers) the knowledge tree's
  // update — all before decoding, so answers decoded together see the tiers as answers decoded
  // one by one do.
  PrefilledAnswer prefill(const std::string& question, const std::vector<const Chunk*>& chunks,
                          const AnswerOptions& opt);
  // answer's last part: the decoded answer into the record.
  static AnswerRecord finish(PrefilledAnswer&& p, DecodeResult&& d);

  const Model& model() const { return model_; }

  const CacheKeys& keys() const { return keys_; }
  // XXH64 of the prompt's token ids: equal exactly when answer() would prefill the same tokens.
  uint64_t prompt_hash(const std::string& question, const std::vector<const Chunk*>& chunks) const;
  // The prompt of (chunks, question, history), built (tokenized) once: the run's scheduling, its
  // conversation fitting, eval's modes and the prefill all take it from here. The last
  // kPromptMemo distinct prompts are kept (a run looks ahead at most its reorder window).
  std::shared_ptr<const RagPrompt> prompt(const std::vector<const Chunk*>& chunks, const std::string& question,
                                          const std::vector<PastTurn>& history = {}) const;
  size_t prompts_built() const { return prompts_built_; }  // prompts tokenized so far (tests)
  static constexpr size_t kPromptMemo = 256;

 private:
  // The knowledge-tree segments of a prefilled prompt, for KvTiers::record_prompt.
  std::vector<PromptNode> tree_nodes(const RagPrompt& prompt, const PrefillPlan& plan, const PrefillStats& st,
                                     const AnswerOptions& opt) const;
  std::vector<std::shared_ptr<const SegmentKv>> carried_segments(const RagPrompt& prompt, const AnswerOptions& opt) const;
  size_t fall_back_to_prefix(const RagPrompt& prompt, const PrefillPlan& plan, size_t kept, KvCache& kv,
                             PrefillResult& pre);
  std::vector<ChunkProvenance> provenance(const RagPrompt& prompt, const PrefillPlan& plan, size_t n_carried,
                                          const AnswerRecord& rec) const;
  std::shared_ptr<const CarriedKv> carry(const RagPrompt& prompt, const PrefillPlan& plan,
                                         const std::vector<std::shared_ptr<const SegmentKv>>& carried,
                                         const KvCache& kv, bool composed) const;

  const Model& model_;
  const PromptFormat& format_;
  KvTiers* tiers_;
  VariantLedger* ledger_;
  CacheKeys keys_;
  Workspace ws_;
  // prompt()'s memo: by a hash of its inputs (each chunk's id and text, the question, the
  // history), oldest first out; the inputs themselves kept to rule out a hash collision.
  struct MemoPrompt {
    std::string key;
    std::shared_ptr<const RagPrompt> prompt;
  };
  mutable std::mutex memo_mutex_;
  mutable std::unordered_map<uint64_t, MemoPrompt> memo_;
  mutable std::deque<uint64_t> memo_order_;
  mutable size_t prompts_built_ = 0;
};

}  // namespace ragkv
