// JSON files whole, JSONL files line by line.
#include "core/util/json-files.h"

#include <fmt/format.h>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/utf8.h"

namespace ragkv {

namespace {
// nlohmann's message without its "[json.exception.parse_error.101] " tag.
std::string json_error_text(const nlohmann::json::exception& e) {
  std::string what = e.what();
  if (const size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
  return what;
}

nlohmann::json parse_json_text(const std::filesystem::path& path, const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), json_error_text(e));
  }
}
}  // namespace

nlohmann::json read_json_file(const std::filesystem::path& path) { return parse_json_text(path, read_file(path)); }

nlohmann::json read_store_json_file(const std::filesystem::path& path) {
  return parse_json_text(path, read_regular_file(path));
}

void for_each_jsonl_line(std::string_view content, const std::function<void(size_t, std::string_view)>& f) {
  if (content.starts_with("\xEF\xBB\xBF")) content.remove_prefix(3);
  size_t line_no = 0;
  for (size_t start = 0; start < content.size();) {
    size_t end = content.find('\n', start);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!is_blank(line)) f(line_no, line);
  }
}

nlohmann::json parse_json_line(std::string_view line) {
  if (const size_t bad = find_invalid_utf8(line); bad != std::string_view::npos)
    throw JsonLineError{InputProblemKind::invalid_utf8,
                        fmt::format("invalid UTF-8 (byte 0x{:02x} at column {})", uint8_t(line[bad]), bad + 1)};
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw JsonLineError{InputProblemKind::bad_json, "not valid JSON: " + json_error_text(e)};
  }
}

bool for_each_resumed_record(const std::string& path, std::string_view content,
                             const std::function<void(size_t, std::string_view, const nlohmann::json&)>& f) {
  size_t last_line = 0;  // the last non-blank line: only it may be unfinished
  for_each_jsonl_line(content, [&](size_t n, std::string_view) { last_line = n; });
  const bool ends_cleanly = !content.empty() && content.back() == '\n';
  bool dropped = false;
  for_each_jsonl_line(content, [&](size_t n, std::string_view line) {
    nlohmann::json rec;
    try {
      rec = parse_json_line(line);
    } catch (const JsonLineError& e) {
      if (n == last_line && !ends_cleanly) {
        dropped = true;
        return;
      }
      fail("{}:{}: {}", path, n, e.what);
    }
    f(n, line, rec);
  });
  return dropped;
}

}  // namespace ragkv
