// Corpus input for build-index (DESIGN.md §1 "Files"): `.txt`/`.md` files or directories of
// them (one document per file, id = path relative to the corpus root) and `.jsonl` files with
// {"id","title"?,"text"} per line. Bad input (empty or binary files, invalid UTF-8, a line that
// is not JSON or lacks "text"/"id", duplicate ids) is an Error naming file and line, or with
// OnError::skip is skipped and reported back so the CLI can print counts and reasons.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ragkv {

struct Document {
  std::string id;      // JSONL "id", or for files the path relative to the corpus root ('/'-separated)
  std::string title;   // JSONL "title" ("" when absent); "" for .txt/.md files
  std::string text;    // valid UTF-8, a leading BOM removed; chunk offsets are bytes into this
  std::string source;  // file it came from (as found under the input path)
  size_t line = 0;     // 1-based line in a JSONL file; 0 for a whole-file document
};

enum class OnError { fail, skip };

enum class InputProblemKind {
  empty,          // empty file, blank text, or a JSONL file without documents
  binary,         // NUL bytes (binary file, UTF-16, "\u0000" in a JSON text)
  invalid_utf8,   // bytes that are not UTF-8
  bad_json,       // a JSONL line that is not a JSON object
  missing_field,  // no string "text" or no "id" (string or integer), or a non-string "title"
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

struct Corpus {
  std::vector<Document> docs;         // in input order; files of a directory sorted by path
  std::vector<InputProblem> skipped;  // OnError::skip only
  size_t files_read = 0;
  // Skipped inputs counted per problem name ("invalid-utf8" -> 3, ...).
  std::map<std::string, size_t> skipped_by_kind() const;
};

// Loads every input path: a .txt/.md/.jsonl file, or a directory searched recursively for such
// files (hidden entries skipped). A path that does not exist, a file of another type named
// explicitly, and a corpus with no document left are Errors under either policy.
Corpus load_corpus(const std::vector<std::filesystem::path>& inputs, OnError on_error);

// True when s holds only whitespace (or nothing).
bool is_blank(std::string_view s);

// Calls f(line_number, line) for every non-blank line of JSONL text, with 1-based line numbers;
// a leading UTF-8 BOM and CR line ends are removed. Shared by the corpus and query readers.
void for_each_jsonl_line(std::string_view content, const std::function<void(size_t, std::string_view)>& f);

// One JSONL line that is not valid UTF-8 (invalid_utf8) or not valid JSON (bad_json), with what
// is wrong; readers add "FILE:LINE: ".
struct JsonLineError {
  InputProblemKind kind;
  std::string what;
};
// The JSON value of one line, its UTF-8 checked first; throws JsonLineError.
nlohmann::json parse_json_line(std::string_view line);

// Byte offset of the first byte that is not well-formed UTF-8 (overlong forms, surrogates and
// code points above U+10FFFF included), or npos when all of s is valid.
size_t find_invalid_utf8(std::string_view s);

}  // namespace ragkv
