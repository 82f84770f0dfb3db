// Reading JSON and JSONL files: the one JSON file reader (errors name the file) and the JSONL
// line walker with its per-line parse, shared by the corpus, query and eval-record readers.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/input-problems.h"

namespace ragkv {

// The JSON value of a whole file; Error "FILE: cannot open …" or "FILE: not valid JSON: …".
nlohmann::json read_json_file(const std::filesystem::path& path);

// Calls f(line_number, line) for every non-blank line of JSONL text, with 1-based line numbers;
// a leading UTF-8 BOM and CR line ends are removed.
void for_each_jsonl_line(std::string_view content, const std::function<void(size_t, std::string_view)>& f);

// One JSONL line that is not valid UTF-8 (invalid_utf8) or not valid JSON (bad_json), with what
// is wrong; readers add "FILE:LINE: ".
struct JsonLineError {
  InputProblemKind kind;
  std::string what;
};
// The JSON value of one line, its UTF-8 checked first; throws JsonLineError.
nlohmann::json parse_json_line(std::string_view line);

}  // namespace ragkv
