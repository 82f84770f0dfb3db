// Scoring one answer (DESIGN.md §6), the one place every command scores: against the gold
// answers (SQuAD F1 and exact match, best over the golds) and against a baseline's answer to the
// same prompt (answer F1 and ROUGE-L, first-token agreement, identical output).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ragkv {

struct GoldScores {
  double f1 = 0, em = 0;  // max over the golds; 0 when there is none
};
GoldScores score_against_golds(std::string_view answer, const std::vector<std::string>& golds);

struct Agreement {
  double f1 = 0, rouge_l = 0;   // of the answer texts
  bool first_token = false;     // the first generated tokens are equal (or both answers are empty)
  bool identical = false;       // the generated token sequences are equal
};
Agreement score_against_baseline(std::string_view answer, std::span<const int32_t> output_ids,
                                 std::string_view base_answer, std::span<const int32_t> base_output_ids);

}  // namespace ragkv
