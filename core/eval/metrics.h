// Answer-quality metrics (DESIGN.md §6): SQuAD v1.1 normalisation, token F1 and exact match
// against gold answers, ROUGE-L against the full-recompute answer, KL divergence of first-token
// distributions, and percentile-bootstrap confidence intervals of means and paired differences.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ragkv {

// The official SQuAD v1.1 normalize_answer: lower-case (ASCII letters; other bytes are kept),
// drop ASCII punctuation, drop the whole words a/an/the, collapse whitespace to single spaces.
// Whitespace is what Python's str.split() splits on (U+00A0, U+2000..U+200A, ...); for the
// article rule's word boundaries the dashes and curly quotes of U+2010..U+203E separate words
// and other non-ASCII characters count as letters.
std::string normalize_answer(std::string_view s);
std::vector<std::string> answer_tokens(std::string_view s);  // normalize_answer(s) split on spaces

// SQuAD v1.1 f1_score: bag-of-tokens overlap (with multiplicity); 0 when nothing is shared
// (also when both sides normalise to nothing, as in the official script).
double token_f1(std::string_view pred, std::string_view gold);
// 1.0 when both normalise to the same string, else 0.0.
double exact_match(std::string_view pred, std::string_view gold);
// max of metric(pred, gold) over the golds; 0 when there is none.
double max_over_golds(double (*metric)(std::string_view, std::string_view), std::string_view pred,
                      const std::vector<std::string>& golds);

// ROUGE-L F-measure (Lin 2004, §3.1, beta = 1) over normalised tokens: P = lcs/|a|, R = lcs/|b|,
// F = 2PR/(P+R); 1.0 when both are empty, 0 when exactly one is.
double rouge_l_f1(std::string_view a, std::string_view b);

// KL(P‖Q) in nats, P = softmax(p_logits), Q = softmax(q_logits), via log-sum-exp in double.
// Error when the sizes differ or are 0, or a logit is NaN/+inf or all are -inf.
double kl_divergence_logits(std::span<const float> p_logits, std::span<const float> q_logits);

struct MeanInterval {
  double mean = 0, lo = 0, hi = 0;  // sample mean and its 95 % interval [lo, hi]
};

// Percentile bootstrap: the 2.5th/97.5th percentiles (linear interpolation) of the means of
// `resamples` resamples with replacement; deterministic for a seed (std::mt19937_64). Empty
// input gives all zeros; resamples < 1 is an Error.
MeanInterval bootstrap_mean(std::span<const double> x, int resamples = 2000, uint64_t seed = 1);
// Paired: bootstrap_mean over a[i] - b[i]; Error when the sizes differ.
MeanInterval bootstrap_mean_difference(std::span<const double> a, std::span<const double> b, int resamples = 2000,
                                       uint64_t seed = 1);

// Recovery (FusionRAG's normalised score, ANCHORS.md): the share of a reference's damage that a
// mode repairs, 1 − mean(damage_mode) / mean(damage_ref) — 0 no better than the reference (reuse),
// 1 as good as the baseline (full). Paired percentile bootstrap over the queries, deterministic
// for a seed; resamples whose reference damage is 0 have no recovery and are left out.
// `defined` is false when the reference does no damage at all on the sample (mean 0).
struct RecoveryInterval {
  bool defined = false;
  double mean = 0, lo = 0, hi = 0;
};
RecoveryInterval bootstrap_recovery(std::span<const double> damage_ref, std::span<const double> damage_mode,
                                    int resamples = 2000, uint64_t seed = 1);

}  // namespace ragkv
