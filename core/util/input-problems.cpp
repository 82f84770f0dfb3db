// Names of input problems, for messages and the skipped-line counts the commands print.
#include "core/util/input-problems.h"

#include "core/util/enum-names.h"

namespace ragkv {

namespace {
constexpr EnumNames<InputProblemKind, 7> kNames{{{
    {InputProblemKind::empty, "empty"},
    {InputProblemKind::binary, "binary"},
    {InputProblemKind::invalid_utf8, "invalid-utf8"},
    {InputProblemKind::bad_json, "bad-json"},
    {InputProblemKind::missing_field, "missing-field"},
    {InputProblemKind::duplicate_id, "duplicate-id"},
    {InputProblemKind::unreadable, "unreadable"},
}}};
constexpr EnumNames<OnError, 2> kOnErrorNames{{{{OnError::fail, "fail"}, {OnError::skip, "skip"}}}};
}  // namespace

OnError parse_on_error(const std::string& s) { return kOnErrorNames.parse(s, "--on-error policy"); }
std::vector<std::string> on_error_names() { return kOnErrorNames.names(); }

const char* input_problem_name(InputProblemKind k) { return kNames.name(k); }

std::map<std::string, size_t> count_by_kind(const std::vector<InputProblem>& problems) {
  std::map<std::string, size_t> counts;
  for (const auto& p : problems) ++counts[input_problem_name(p.kind)];
  return counts;
}

}  // namespace ragkv
