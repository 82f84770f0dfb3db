// Token selection for blend (DESIGN.md §4 "The fusor"): on a check layer, a score for every
// active row — higher means recompute first — by the plan's Selection method. The fusor keeps
// the best-scoring candidates (select_hkvd_rows, core/rag/plan.h); this file only scores.
//
// Deviation scores compare the rows' freshly computed K/V (ws.k, ws.v) with what the prompt's KV
// holds for them — the cache, rotated to the new position — so they must be taken before the
// recomputed rows are scattered over the cache. Question scores read the attention of the
// question's queries over the whole KV, so they are taken after the scatter.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/model/model.h"
#include "core/rag/plan.h"

namespace ragkv {

// What the scorers read on check layer `layer`.
struct CheckLayerState {
  const Model& model;
  int layer = 0;
  std::span<const int32_t> active;  // prompt rows of ws's first active.size() rows, ascending
  const Workspace& ws;              // ws.q, ws.k, ws.v of the active rows at this layer
  const KvCache& kv;                // the prompt's KV (rows [0, n_kv))
  int64_t n_kv = 0;
  int64_t question_begin = 0;       // first prompt row of the question (always active, last)
};

// The selection a blend mode without /METHOD uses on a model: the method that recovered most of
// reuse's damage per unit of real compute on that architecture family (bench/results/README.md,
// "Chunk-KV reuse fidelity"): prophet
// for llama/qwen2 and gemma3 alike, ahead of kv, v, head-v, question, sink and random on SQuAD
// and MuSiQue with SmolLM2 and Gemma 3.
Selection default_selection(const ModelConfig& c);
// The commands' default --recompute-ratio: with prophet, 0.2 keeps the real compute fraction
// under 0.2 (the exact prefix is reused but never recomputed) at recovery ≥ 0.8 (bench/results).
inline constexpr double kDefaultRecomputeRatio = 0.2;

bool needs_deviation(Selection s);  // scores that read the cache before the scatter
bool needs_question(Selection s);   // scores that read the question's attention after it

// Per active row, before the scatter: ‖ΔK‖² + ‖ΔV‖², ‖ΔV‖², or per-head normalised ‖ΔV‖²
// (CacheBlend §4.1). Empty when s needs no deviation.
std::vector<float> deviation_scores(Selection s, const CheckLayerState& st, const std::vector<uint8_t>& candidate);
// Per active row, after the scatter: the attention mass the question's queries put on it,
// summed over query rows and heads (ProphetKV §3, A³). Empty when s needs none.
std::vector<float> question_scores(Selection s, const CheckLayerState& st);
// The attention mass the question's queries put on every key row [0, n_kv) at this layer, summed
// over query rows and heads (question_scores is this, read at the active rows).
std::vector<float> question_attention(const CheckLayerState& st);
// What makes the layer's own attention over st.active (Model::layer_attend_ffn after the
// scatter, the active rows unchanged) yield question_attention into `total` as well, deferred
// (SegmentMass::deferred: filled by the backend's next synchronize(), so that a pass over every
// layer waits for the device once, not per layer): key totals from the question's rows, the
// last active rows (SegmentMass::first_query). One attention per layer instead of the layer's
// and a second of the question's rows.
SegmentMass question_attention_request(const CheckLayerState& st, std::vector<float>& total);
// The score the selection ranks by, from the parts above (random: a uniform draw per row,
// reproducible from seed, prompt hash and layer).
std::vector<float> selection_scores(Selection s, const CheckLayerState& st, const std::vector<uint8_t>& candidate,
                                    std::vector<float> deviation, std::vector<float> question, uint64_t seed);

}  // namespace ragkv
