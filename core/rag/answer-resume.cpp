// read_answer_records: the kept records of `answer --resume` (core/rag/answer-resume.h).
#include "core/rag/answer-resume.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace ragkv {

using nlohmann::json;

ResumedAnswers read_answer_records(const std::string& out, const std::string& mode,
                                   const std::set<std::string>& query_ids) {
  ResumedAnswers r;
  for (const std::string& from : {out + ".partial", out}) {
    if (std::filesystem::exists(from)) {
      r.from = from;
      break;
    }
  }
  if (r.from.empty()) return r;
  const std::string content = read_file(r.from);
  r.dropped_partial_line = for_each_resumed_record(r.from, content, [&](size_t n, std::string_view line, const json& rec) {
    if (!rec.is_object() || !rec.contains("id") || !rec["id"].is_string() || !rec.contains("answer"))
      fail("{}:{}: not a record of ragkv answer (no id and answer)", r.from, n);
    const std::string id = rec["id"].get<std::string>();
    if (rec.value("mode", "") != mode)
      fail("{}:{}: answered in mode {}, this run answers in {}: resume with the same --mode, or answer into another --out",
           r.from, n, rec.value("mode", json("unrecorded")).dump(), mode);
    if (!query_ids.count(id)) fail("{}:{}: query {} is not in the queries file", r.from, n, id);
    if (!r.ids.insert(id).second) fail("{}:{}: query {} appears twice", r.from, n, id);
    r.lines.emplace_back(line);
  });
  return r;
}

std::vector<Query> queries_left(const std::vector<Query>& queries, ResumedAnswers& r) {
  std::set<std::string> unfinished;  // conversations with a turn not yet answered
  for (const Query& q : queries)
    if (!q.conversation.empty() && !r.ids.count(q.id)) unfinished.insert(q.conversation);
  std::set<std::string> redo;  // ids of kept turns of those conversations
  for (const Query& q : queries)
    if (unfinished.count(q.conversation) && r.ids.count(q.id)) redo.insert(q.id);
  if (!redo.empty()) {
    std::vector<std::string> kept;
    for (const std::string& line : r.lines)
      if (!redo.count(json::parse(line).at("id").get<std::string>())) kept.push_back(line);
    r.lines = std::move(kept);
    for (const std::string& id : redo) r.ids.erase(id);
  }
  std::vector<Query> left;
  for (const Query& q : queries)
    if (!r.ids.count(q.id)) left.push_back(q);
  return left;
}

}  // namespace ragkv
