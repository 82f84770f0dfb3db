// Reading JSON and JSONL files: the one JSON file reader (errors name the file) and the JSONL
// line walker with its per-line parse, shared by the corpus, query and eval-record readers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/util/input-problems.h"

namespace ragkv {

// The JSON value of a whole file; Error "FILE: cannot open …" or "FILE: not valid JSON: …".
nlohmann::json read_json_file(const std::filesystem::path& path);
// The same for a file of a store: read with read_regular_file (core/util/file-io.h).
nlohmann::json read_store_json_file(const std::filesystem::path& path);

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

// The records of an output file a run resumes (an interrupted run's FILE.partial, or FILE):
// f(line_number, line, record) for every non-blank line of content, parsed. Only the last line
// may have been cut short by the interruption: then it is skipped and true returned; any other
// line that is not JSON is an Error naming path:line.
bool for_each_resumed_record(const std::string& path, std::string_view content,
                             const std::function<void(size_t, std::string_view, const nlohmann::json&)>& f);

// The integer j holds, as T, when j is an integer number T can represent. Otherwise throws what
// j.get<T>() throws for a value of the wrong type, nlohmann::json::type_error (not an integer) or
// out_of_range (too large for T), so a reader's json::exception handler names the file. Readers
// of files use it instead of get<T>() for integers: get<T>() converts a float such as 1e47 to T
// by an undefined cast (found by fuzzing the index manifest) and wraps 2^32 + 16 to an int 16.
template <typename T>
T json_integer(const nlohmann::json& j) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (j.is_number_unsigned() || j.is_number_integer()) {
    const bool is_unsigned = j.is_number_unsigned();
    const uint64_t u = is_unsigned ? j.get<uint64_t>() : 0;
    const int64_t i = is_unsigned ? 0 : j.get<int64_t>();
    if (is_unsigned ? std::in_range<T>(u) : std::in_range<T>(i)) return is_unsigned ? T(u) : T(i);
    throw nlohmann::json::out_of_range::create(
        406, "number " + j.dump() + " is out of range for a " + std::to_string(8 * sizeof(T)) + "-bit integer", &j);
  }
  throw nlohmann::json::type_error::create(302, std::string("type must be an integer, but is ") + j.type_name(), &j);
}

}  // namespace ragkv
