// Fuzz target: QUERIES.jsonl (core/rag/queries.*), the file `answer` and `eval` read, under both
// --on-error policies. Every query kept must be what the reader promises: a non-empty id, a
// non-blank question, a 1-based line of the file, ids unique; every skipped line names FILE:LINE.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "fuzz/fuzz-common.h"
#include "core/rag/queries.h"
#include "core/util/utf8.h"

using namespace ragkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto path = fuzz::write_scratch("queries.jsonl", text);
  const std::string name = path.string();
  const size_t n_lines = size_t(std::count(text.begin(), text.end(), '\n')) + 1;
  fuzz::expect_ok_or_error(name, [&] { load_queries(path, OnError::fail); });
  fuzz::expect_ok_or_error(name, [&] {
    const QueryFile f = load_queries(path, OnError::skip);
    std::set<std::string> ids;
    size_t last_line = 0;
    for (const Query& q : f.queries) {
      RAGKV_FUZZ_CHECK(!q.id.empty() && !is_blank(q.question), "query at line {} kept without id or question", q.line);
      RAGKV_FUZZ_CHECK(q.line > last_line && q.line <= n_lines, "query line {} after {} in {} lines", q.line, last_line,
                       n_lines);
      RAGKV_FUZZ_CHECK(ids.insert(q.id).second, "id '{}' kept twice", q.id);
      last_line = q.line;
    }
    for (const InputProblem& p : f.skipped)
      RAGKV_FUZZ_CHECK(p.message.starts_with(name + ":" + std::to_string(p.line) + ": "), "skip message '{}'",
                       p.message);
  });
  return 0;
}
