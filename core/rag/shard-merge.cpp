// merge_shard_records: shard record files → one, in input order, every query once.
#include "core/rag/shard-merge.h"

#include <filesystem>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace ragkv {

MergedRecords merge_shard_records(const QueryFile& queries, const std::string& queries_path,
                                  const std::vector<std::string>& shard_files) {
  if (shard_files.empty()) fail("merge: no shard files given");
  std::map<std::string, size_t> position;  // query id → its index in the file
  for (size_t i = 0; i < queries.queries.size(); ++i)
    if (!position.emplace(queries.queries[i].id, i).second)
      fail("{}:{}: query id {} appears twice: records cannot be matched to lines", queries_path,
           queries.queries[i].line, queries.queries[i].id);
  std::vector<std::string> lines(queries.queries.size());
  std::vector<std::string> from(queries.queries.size());  // the file each record came from
  for (const std::string& file : shard_files) {
    if (!std::filesystem::exists(file) && std::filesystem::exists(file + ".partial"))
      fail("{}: not finished (only {}.partial exists): rerun that shard (eval: with --resume)", file, file);
    const std::string content = read_regular_file(file);
    for_each_jsonl_line(content, [&](size_t n, std::string_view line) {
      nlohmann::json rec;
      try {
        rec = parse_json_line(line);
      } catch (const JsonLineError& e) {
        fail("{}:{}: {}", file, n, e.what);
      }
      if (!rec.is_object() || !rec.contains("id") || !rec["id"].is_string())
        fail("{}:{}: not a record of answer --out or eval --answers (no string \"id\")", file, n);
      const std::string id = rec["id"].get<std::string>();
      const auto it = position.find(id);
      if (it == position.end()) fail("{}:{}: query {} is not in {}", file, n, id, queries_path);
      if (!from[it->second].empty())
        fail("query {} is in {} and in {}:{}: two shards answered it (were they given the same --shard?)", id,
             from[it->second], file, n);
      from[it->second] = fmt::format("{}:{}", file, n);
      lines[it->second] = std::string(line);
    });
  }
  for (size_t i = 0; i < lines.size(); ++i)
    if (from[i].empty())
      fail("query {} ({}:{}) is in none of the {} shard files: a shard is missing, failed or skipped it", queries.queries[i].id,
           queries_path, queries.queries[i].line, shard_files.size());
  return {std::move(lines), shard_files.size()};
}

}  // namespace ragkv
