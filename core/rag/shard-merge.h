// `ragkv merge`: the answer (or eval) record files of a sharded run → one file in the query file's
// order, checked complete: every query of the file exactly once. Records are JSON lines with the
// query's "id" (answer --out, eval --answers); they are copied as they are.
#pragma once
#include <string>
#include <vector>

#include "core/rag/queries.h"

namespace ragkv {

struct MergedRecords {
  std::vector<std::string> lines;  // in the queries' order
  size_t shards = 0;
};

// Error naming the query and the files for a query in no shard file (a shard missing or not
// finished), in two of them, a record of a query not in `queries`, or a line that is not a record.
MergedRecords merge_shard_records(const QueryFile& queries, const std::string& queries_path,
                                  const std::vector<std::string>& shard_files);

}  // namespace ragkv
