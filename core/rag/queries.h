// QUERIES.jsonl (DESIGN.md §1 "Files"): one question per line, {"id","question","answers"?,
// "passages"?,"gold_passages"?,"conversation"?,"turn"?}. A bad line is an Error naming file and
// line, or with OnError::skip is skipped and reported back, as for the corpus.
#pragma once
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/util/input-problems.h"

namespace ragkv {

struct Query {
  std::string id;                          // "id": a non-empty string, or an integer in decimal
  std::string question;                    // non-blank
  std::vector<std::string> answers;        // gold answers (may be empty)
  std::vector<std::string> passages;       // fixed context: document ids, in prompt order (empty: retrieve)
  std::vector<std::string> gold_passages;  // document ids that hold the answer (retrieval metrics only)
  std::string conversation;                // "" when the query stands alone
  int turn = 0;                            // position in its conversation
  std::string source;                      // file it came from
  size_t line = 0;                         // 1-based line in that file
};

struct QueryFile {
  std::vector<Query> queries;         // in file order
  std::vector<InputProblem> skipped;  // OnError::skip only
  // Skipped lines counted per problem name ("bad-json" -> 2, ...).
  std::map<std::string, size_t> skipped_by_kind() const { return count_by_kind(skipped); }
};

// Reads a QUERIES.jsonl file; blank lines are ignored, a leading BOM and CRLF endings accepted.
// Bad lines: not a JSON object (bad_json), invalid UTF-8 (invalid_utf8), no "id" (string or
// integer) or no non-blank string "question", or an "answers"/"passages"/"gold_passages" that is
// not an array of strings, a non-string "conversation", a "turn" that is not an integer
// (missing_field), an id seen before (duplicate_id; the first is kept). A missing or unreadable
// file, and a file with no query left, are Errors under either policy.
QueryFile load_queries(const std::filesystem::path& path, OnError on_error);

}  // namespace ragkv
