// What a reader of user input (corpus files, query files) does with a bad line or file: fail
// naming file and line, or skip it and report it back (DESIGN.md §7). Shared by every reader.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace ragkv {

enum class OnError { fail, skip };
OnError parse_on_error(const std::string& s);  // "fail" or "skip"; Error otherwise
std::vector<std::string> on_error_names();      // for flag validators

enum class InputProblemKind {
  empty,          // empty file, blank text, or a JSONL file without documents
  binary,         // NUL bytes (binary file, UTF-16, "\u0000" in a JSON text)
  invalid_utf8,   // bytes that are not UTF-8
  bad_json,       // a JSONL line that is not a JSON object
  missing_field,  // a required field absent or of the wrong type
  duplicate_id,   // an id seen before (the first one is kept)
  unreadable,     // the file could not be read
};
const char* input_problem_name(InputProblemKind k);  // "empty", "binary", "invalid-utf8", ...

struct InputProblem {
  InputProblemKind kind;
  std::string source;   // file
  size_t line = 0;      // 1-based
  std::string message;  // "FILE:LINE: what is wrong" (the text the Error carries under OnError::fail)
};

// Problems counted per name ("invalid-utf8" -> 3, ...).
std::map<std::string, size_t> count_by_kind(const std::vector<InputProblem>& problems);

}  // namespace ragkv
