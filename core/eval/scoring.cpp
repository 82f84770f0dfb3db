// score_against_golds and score_against_baseline over the metrics of core/eval/metrics.h.
#include "core/eval/scoring.h"

#include <algorithm>

#include "core/eval/metrics.h"

namespace ragkv {

GoldScores score_against_golds(std::string_view answer, const std::vector<std::string>& golds) {
  return {max_over_golds(token_f1, answer, golds), max_over_golds(exact_match, answer, golds)};
}

Agreement score_against_baseline(std::string_view answer, std::span<const int32_t> output_ids,
                                 std::string_view base_answer, std::span<const int32_t> base_output_ids) {
  Agreement a;
  a.f1 = token_f1(answer, base_answer);
  a.rouge_l = rouge_l_f1(answer, base_answer);
  a.first_token = !output_ids.empty() && !base_output_ids.empty() ? output_ids[0] == base_output_ids[0]
                                                                  : output_ids.empty() == base_output_ids.empty();
  a.identical = std::equal(output_ids.begin(), output_ids.end(), base_output_ids.begin(), base_output_ids.end());
  return a;
}

}  // namespace ragkv
