// One process's share of a job run as many (a Slurm job array, a Kubernetes Indexed Job, or by
// hand): shard `index` of `count`, 0-based. Work items are owned by a hash of their content key
// (precompute's chunks) so shards never overlap and a re-run with another count reuses what is
// stored.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ragkv {

struct Shard {
  size_t index = 0, count = 1;
  std::string source;  // where it came from: "--shard", "SLURM_ARRAY_TASK_ID", …; "" for the whole job
  bool sharded() const { return count > 1; }
  bool owns(uint64_t key) const { return count <= 1 || key % count == index; }
  std::string name() const;  // "I/N"
};

// The shard from `--shard I/N` when given, else from the environment: Slurm's
// SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT, or Kubernetes'
// JOB_COMPLETION_INDEX of `count_flag` (--shard-count), else RAGKV_SHARD_COUNT (Kubernetes exports
// no count); else the whole job (0/1). Error naming the flag or variable for a malformed value, an
// index not below the count, or a Kubernetes index without a count. env: getenv by default.
Shard resolve_shard(const std::string& flag, std::optional<size_t> count_flag,
                    const std::function<const char*(const char*)>& env = {});

}  // namespace ragkv
