// Scoring `answer`'s answers as they complete: gold F1/EM against the query's answers, and
// agreement with the comparison mode's answer (F1, ROUGE-L, first token, first-token KL), added to
// each record's metrics and summed for the run's summary.
#pragma once
#include <cstddef>

#include <nlohmann/json.hpp>

#include "core/rag/answer-run.h"

namespace ragkv {

class AnswerScoring {
 public:
  void score(AnsweredQuery& a);
  // "f1", "em" (means over queries with gold answers), "f1_vs_full", "first_token_match" (means
  // over compared answers); null where there was nothing to average.
  nlohmann::json summary() const;

 private:
  size_t n_gold_ = 0, n_compare_ = 0;
  double f1_ = 0, em_ = 0, vs_f1_ = 0, vs_first_ = 0;
};

}  // namespace ragkv
