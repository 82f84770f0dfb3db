// QUERIES.jsonl reader: each line validated into a Query; bad lines fail with file and line or
// are skipped and reported (OnError), as the corpus reader does.
#include "core/rag/queries.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"
#include "core/util/utf8.h"

namespace ragkv {

namespace fs = std::filesystem;

namespace {

// Thrown by parse_line with the kind and text of what is wrong; load_queries adds FILE:LINE.
struct LineProblem {
  InputProblemKind kind;
  std::string what;
};

// An optional array of strings; absent or null leaves `into` empty.
void read_strings(const nlohmann::json& j, const char* field, std::vector<std::string>& into) {
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return;
  const bool ok = it->is_array() && std::all_of(it->begin(), it->end(), [](const auto& v) { return v.is_string(); });
  if (!ok)
    throw LineProblem{InputProblemKind::missing_field, fmt::format("field \"{}\" is not an array of strings", field)};
  for (const auto& v : *it) into.push_back(v.get<std::string>());
}

Query parse_line(std::string_view line) {
  nlohmann::json j;
  try {
    j = parse_json_line(line);
  } catch (const JsonLineError& e) {
    throw LineProblem{e.kind, e.what};
  }
  if (!j.is_object())
    throw LineProblem{InputProblemKind::bad_json,
                      fmt::format("expected a JSON object {{\"id\",\"question\",...}}, got {}", j.type_name())};
  Query q;
  const auto id = j.find("id");
  if (id != j.end() && id->is_string())
    q.id = id->get<std::string>();
  else if (id != j.end() && (id->is_number_integer() || id->is_number_unsigned()))
    q.id = id->dump();
  if (q.id.empty())
    throw LineProblem{InputProblemKind::missing_field,
                      id == j.end() ? "missing field \"id\"" : "field \"id\" must be a non-empty string or an integer"};
  const auto question = j.find("question");
  if (question == j.end() || !question->is_string() || is_blank(question->get<std::string>()))
    throw LineProblem{InputProblemKind::missing_field, question == j.end()
                                                           ? "missing field \"question\""
                                                           : "field \"question\" must be a non-empty string"};
  q.question = question->get<std::string>();
  read_strings(j, "answers", q.answers);
  read_strings(j, "passages", q.passages);
  read_strings(j, "gold_passages", q.gold_passages);
  if (const auto c = j.find("conversation"); c != j.end() && !c->is_null()) {
    if (c->is_string())
      q.conversation = c->get<std::string>();
    else if (c->is_number_integer() || c->is_number_unsigned())
      q.conversation = c->dump();
    else
      throw LineProblem{InputProblemKind::missing_field, "field \"conversation\" must be a string or an integer"};
  }
  if (const auto t = j.find("turn"); t != j.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0 || t->get<int64_t>() > std::numeric_limits<int>::max())
      throw LineProblem{InputProblemKind::missing_field, "field \"turn\" must be a non-negative integer"};
    q.turn = t->get<int>();
  }
  return q;
}

}  // namespace

QueryFile load_queries(const fs::path& path, OnError on_error) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("queries file does not exist: {}", path.string());
  if (fs::is_directory(path, ec)) fail("{}: is a directory, expected a QUERIES.jsonl file", path.string());
  const std::string content = read_file(path);
  const std::string src = path.string();
  QueryFile out;
  std::unordered_map<std::string, size_t> seen;  // id -> line of its first query
  auto problem = [&](InputProblemKind kind, size_t line, const std::string& what) {
    std::string msg = fmt::format("{}:{}: {}", src, line, what);
    if (on_error == OnError::fail) fail("{}", msg);
    out.skipped.push_back(InputProblem{kind, src, line, std::move(msg)});
  };
  for_each_jsonl_line(content, [&](size_t line_no, std::string_view line) {
    Query q;
    try {
      q = parse_line(line);
    } catch (const LineProblem& p) {
      problem(p.kind, line_no, p.what);
      return;
    }
    if (const auto [it, inserted] = seen.emplace(q.id, line_no); !inserted) {
      problem(InputProblemKind::duplicate_id, line_no,
              fmt::format("duplicate query id \"{}\" (first at line {})", q.id, it->second));
      return;
    }
    q.source = src;
    q.line = line_no;
    out.queries.push_back(std::move(q));
  });
  if (out.queries.empty()) {
    std::string why;
    for (const auto& [kind, n] : out.skipped_by_kind()) why += fmt::format("{}{} {}", why.empty() ? "" : ", ", n, kind);
    fail("{}: no queries{}", src, why.empty() ? "" : fmt::format(" (skipped: {})", why));
  }
  return out;
}

}  // namespace ragkv
