// Corpus input for build-index (DESIGN.md §1 "Files"): `.txt`/`.md` files or directories of
// them (one document per file, id = path relative to the corpus root) and `.jsonl` files with
// {"id","title"?,"text"} per line. Bad input (empty or binary files, invalid UTF-8, a line that
// is not JSON or lacks "text"/"id", duplicate ids) is an Error naming file and line, or with
// OnError::skip is skipped and reported back so the CLI can print counts and reasons.
#pragma once
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/util/input-problems.h"

namespace ragkv {

struct Document {
  std::string id;      // JSONL "id", or for files the path relative to the corpus root ('/'-separated)
  std::string title;   // JSONL "title" ("" when absent); "" for .txt/.md files
  std::string text;    // valid UTF-8, a leading BOM removed; chunk offsets are bytes into this
  std::string source;  // file it came from (as found under the input path)
  size_t line = 0;     // 1-based line in a JSONL file; 0 for a whole-file document
};

struct Corpus {
  std::vector<Document> docs;         // in input order; files of a directory sorted by path
  std::vector<InputProblem> skipped;  // OnError::skip only
  size_t files_read = 0;
  // Files in the corpus directories that are not corpus files (another extension), by lowercase
  // extension ("" for none), with the first few paths as examples: never skipped silently.
  std::map<std::string, size_t> other_files;
  std::vector<std::string> other_file_examples;
  // Skipped inputs counted per problem name ("invalid-utf8" -> 3, ...).
  std::map<std::string, size_t> skipped_by_kind() const { return count_by_kind(skipped); }
};

// Loads every input path: a text file, a .jsonl file, or a directory searched recursively for such
// files (hidden entries skipped; files of other types counted in Corpus::other_files). Text files
// are those whose extension is in text_exts (lowercase, with the dot; empty: .txt and .md), each
// one document. A path that does not exist, a file of another type named explicitly, and a corpus
// with no document left are Errors under either policy.
Corpus load_corpus(const std::vector<std::filesystem::path>& inputs, OnError on_error,
                   const std::vector<std::string>& text_exts = {});

// "--ext" values as load_corpus takes them: lowercase, with a leading dot ("adoc" -> ".adoc");
// Error for an empty one or ".jsonl" (always a JSONL corpus).
std::vector<std::string> text_extensions(const std::vector<std::string>& given);

}  // namespace ragkv
