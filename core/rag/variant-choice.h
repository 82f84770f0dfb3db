// Cache-Craft's choice among a chunk's cached variants (cache-craft.txt §3.1–3.3): how much a
// variant's context overlaps the new prompt's (β, Eq. 6), how differently it is ordered (γ,
// Eq. 7–8), how contextualised the chunk was (CCI, Eq. 9–11), and from these the Cache Fix
// Overhead CFO = α·CCI·(1 − β′) (Eq. 12): the fraction of the chunk's tokens to recompute. The
// variant with the lowest CFO is reused and its top ⌈CFO·|C|⌉ contextualised tokens recomputed
// (Eq. 14). Pure functions of the metadata; the planner (core/rag/plan.h) applies them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/kv/chunk-kv-file.h"

namespace ragkv {

// Eq. 11: 1 / (1 + e^(−ā/b̄)); 0.5 when nothing outside the chunk was attended (ā = 0), and
// 1 when the chunk attended only outside itself (b̄ = 0 < ā).
double cache_context_impact(double a_bar, double b_bar);

// Eq. 6: the share of the variant's inter-attention that came from context chunks also present
// before the chunk in the new prompt. old_context[j] has inter[j]; 0 for an empty context (a
// canonical cache shares nothing) or when all inter is 0.
double prefix_overlap(const std::vector<std::string>& old_context, const std::vector<float>& inter,
                      const std::vector<std::string>& new_context);

// Eq. 7: the normalised Kendall-tau distance between the order of the chunks common to both
// contexts in the old and in the new one: discordant pairs / (m choose 2); 0 when m < 2.
double order_penalty(const std::vector<std::string>& old_context, const std::vector<std::string>& new_context);

// Eq. 12 with Eq. 8: α·CCI·(1 − β·(1 − γ)), clamped to [0, 1].
double cache_fix_overhead(double alpha, double cci, double beta, double gamma);

// One variant of a chunk, as the choice sees it.
struct VariantCandidate {
  ChunkKvMeta key;  // context included: the store key of the file
  std::optional<VariantStats> stats;
};

// The choice for one chunk of a prompt.
struct VariantChoice {
  size_t index = 0;        // into the candidates
  bool exact = false;      // the variant's context is the prompt's whole preceding chain: no fix
  double beta = 0, gamma = 0, cci = 0.5, cfo = 0;
  int64_t fix_tokens = 0;  // ⌈CFO·|C|⌉ (0 when exact)
};

// α when the store holds no fitted one (eval --fit-alpha, Eq. 13) and the mode names none (craft@A).
// Every CCI is ≥ 0.5 (Eq. 11's sigmoid of a ratio ≥ 0), so without prefix overlap CFO ≥ α/2.
inline constexpr double kDefaultAlpha = 0.35;
// auto's α when the store holds no fitted one: its variant chunks bring ⌈CFO·|C|⌉ tokens to the
// question's choice among all repositioned tokens (craft/prophet's rule), and near-ties then fall
// back (kDefaultAutoFallback). Measured on SQuAD 200 (bench/results/README.md, "The default on
// the frontier"): Gemma 3's first-token agreement with full is the same at α 0.15 as at 0.35
// (0.930) for 0.57× the compute.
inline constexpr double kDefaultAutoAlpha = 0.15;

struct CraftParams {
  double alpha = kDefaultAlpha;  // Eq. 12's scale (Eq. 13 chooses it on a validation split)
  bool use_beta = true;        // ablation "without β": β′ = 0 for every variant
  int focus_window = 3;        // Algorithm 1's w: layers the focused set must hold; 0: no early termination
  bool random_tokens = false;  // ablation: ⌈CFO·|C|⌉ random tokens instead of the CCI-ranked ones
  bool question_tokens = false;  // combination: the variants' Σ⌈CFO·|C|⌉ tokens chosen by the
                                 // question's attention (blend's prophet), not by CCI rank
  uint64_t seed = 1;           // random_tokens: a function of (seed, chunk id)
};

// Chooses among candidates (non-empty) of a chunk preceded in the new prompt by new_context
// (chunk ids, prompt order). A candidate whose context equals new_context is exact. A canonical
// cache without stats takes as CCI the highest of the chunk's variants (computed alone, it holds
// none of the context any prompt adds: the pessimistic estimate), 0.5 when the chunk has none.
// Ties prefer the later candidate (variants are listed after the canonical cache).
VariantChoice choose_variant(const std::vector<VariantCandidate>& candidates, const std::vector<std::string>& new_context,
                             int64_t n_tokens, const CraftParams& params);

// The chunk's token indices to recompute: the first `count` of the chosen variant's ranking
// (Eq. 14); a variant without stats borrows the ranking of another variant of the chunk, and
// without any the first tokens are taken. Ascending.
std::vector<int32_t> craft_fix_tokens(const std::vector<VariantCandidate>& candidates, size_t chosen, int64_t count,
                                      int64_t n_tokens);
// The ablation's control: `count` distinct tokens of [0, n_tokens) drawn uniformly (reproducible
// from seed), ascending.
std::vector<int32_t> random_fix_tokens(int64_t count, int64_t n_tokens, uint64_t seed);

}  // namespace ragkv
