// AnswerScoring: per-answer scores into the record, sums into the summary.
#include "core/eval/answer-scoring.h"

#include "core/eval/metrics.h"
#include "core/eval/scoring.h"

namespace ragkv {

using nlohmann::json;

void AnswerScoring::score(AnsweredQuery& a) {
  if (!a.query.answers.empty()) {
    const GoldScores g = score_against_golds(a.record.answer, a.query.answers);
    a.metrics["f1"] = g.f1;
    a.metrics["em"] = g.em;
    ++n_gold_;
    f1_ += g.f1;
    em_ += g.em;
  }
  if (!a.compared) return;
  const AnswerRecord& r = a.record;
  const AnswerRecord& b = *a.compared;
  const std::string& key = a.compare_name;
  const Agreement g = score_against_baseline(r.answer, r.output_ids, b.answer, b.output_ids);
  a.line[key + "_answer"] = b.answer;
  a.metrics["f1_vs_" + key] = g.f1;
  a.metrics["rougeL_vs_" + key] = g.rouge_l;
  a.metrics["first_token_match"] = g.first_token;
  a.metrics["kl_first_token_vs_" + key] = kl_divergence_logits(b.first_logits, r.first_logits);
  ++n_compare_;
  vs_f1_ += g.f1;
  vs_first_ += g.first_token ? 1.0 : 0.0;
}

json AnswerScoring::summary() const {
  auto mean = [](double s, size_t k) { return k ? json(s / double(k)) : json(nullptr); };
  return {{"f1", mean(f1_, n_gold_)}, {"em", mean(em_, n_gold_)}, {"f1_vs_full", mean(vs_f1_, n_compare_)},
          {"first_token_match", mean(vs_first_, n_compare_)}};
}

}  // namespace ragkv
