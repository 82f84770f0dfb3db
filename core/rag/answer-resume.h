// `answer --resume`: the records an interrupted (OUT.partial) or finished (OUT) answer run wrote,
// kept so that a rerun answers only the rest — a requeued job-array task or a killed shard picks
// up where it stopped (docs/many-machines.md).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "core/rag/queries.h"

namespace ragkv {

struct ResumedAnswers {
  std::string from;                // the file read ("" when neither exists)
  std::vector<std::string> lines;  // the records kept, as read, in file order
  std::set<std::string> ids;
  bool dropped_partial_line = false;  // an unfinished last line (the run was killed mid-write)
};

// Reads OUT.partial, else OUT, else nothing. A last line cut short is dropped; any other line that
// is not an answer record in mode `mode` for a query in query_ids (or that repeats one) is an Error
// naming file:line.
ResumedAnswers read_answer_records(const std::string& out, const std::string& mode,
                                   const std::set<std::string>& query_ids);

// The queries still to answer, in their order. A conversation counts as answered only when all its
// turns are (a later turn's prompt holds the earlier turns' answers as this run makes them): the
// kept records of a conversation left unfinished are dropped from r and the whole of it answered again.
std::vector<Query> queries_left(const std::vector<Query>& queries, ResumedAnswers& r);

}  // namespace ragkv
