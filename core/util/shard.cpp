// resolve_shard: --shard, Slurm's array variables or Kubernetes' completion index.
#include "core/util/shard.h"

#include <cstdlib>

#include <fmt/format.h>

#include "core/util/error.h"

namespace ragkv {

namespace {

// A non-negative decimal number, all of text; Error naming `what` otherwise.
size_t parse_count(const std::string& text, const std::string& what) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 12)
    fail("{}: \"{}\" is not a non-negative whole number", what, text);
  return size_t(std::stoull(text));
}

Shard checked(Shard s) {
  if (s.count == 0) fail("{}: a shard count of 0", s.source);
  if (s.index >= s.count) fail("{}: shard {} of {} (shards are numbered 0 to {})", s.source, s.index, s.count, s.count - 1);
  return s;
}

}  // namespace

std::string Shard::name() const { return fmt::format("{}/{}", index, count); }

Shard resolve_shard(const std::string& flag, std::optional<size_t> count_flag,
                    const std::function<const char*(const char*)>& env_in) {
  const auto env = [&](const char* name) -> std::optional<std::string> {
    const char* v = env_in ? env_in(name) : std::getenv(name);
    if (!v || !*v) return std::nullopt;
    return std::string(v);
  };
  if (!flag.empty()) {
    const size_t slash = flag.find('/');
    if (slash == std::string::npos) fail("--shard {}: expected I/N (shard I of N, from 0)", flag);
    return checked({parse_count(flag.substr(0, slash), "--shard " + flag),
                    parse_count(flag.substr(slash + 1), "--shard " + flag), "--shard"});
  }
  if (const auto id = env("SLURM_ARRAY_TASK_ID")) {
    const auto n = env("SLURM_ARRAY_TASK_COUNT");
    if (!n) fail("SLURM_ARRAY_TASK_ID is set without SLURM_ARRAY_TASK_COUNT: pass --shard I/N");
    const size_t task = parse_count(*id, "SLURM_ARRAY_TASK_ID");
    const size_t min = env("SLURM_ARRAY_TASK_MIN") ? parse_count(*env("SLURM_ARRAY_TASK_MIN"), "SLURM_ARRAY_TASK_MIN") : 0;
    if (task < min) fail("SLURM_ARRAY_TASK_ID {} is below SLURM_ARRAY_TASK_MIN {}", task, min);
    return checked({task - min, parse_count(*n, "SLURM_ARRAY_TASK_COUNT"), "SLURM_ARRAY_TASK_ID"});
  }
  if (const auto id = env("JOB_COMPLETION_INDEX")) {
    std::optional<size_t> n = count_flag;
    if (!n && env("RAGKV_SHARD_COUNT")) n = parse_count(*env("RAGKV_SHARD_COUNT"), "RAGKV_SHARD_COUNT");
    if (!n)
      fail("JOB_COMPLETION_INDEX is set but not the number of shards: pass --shard-count N or set RAGKV_SHARD_COUNT "
           "(Kubernetes exports no count)");
    return checked({parse_count(*id, "JOB_COMPLETION_INDEX"), *n, "JOB_COMPLETION_INDEX"});
  }
  return {};
}

}  // namespace ragkv
