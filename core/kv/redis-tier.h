// A Redis (or Valkey) server as a chunk-KV tier below the store's local disk (`--remote
// redis://host[:port][/db]`; docs/many-machines.md): LMCache's remote tier, for nodes that share no
// file system. The tier only moves bytes under keys; KvStore (core/kv/kv-store.h) decides what the
// keys are and verifies every value as it verifies its own files before one is used, so a wrong,
// truncated, foreign or evicted value is a counted miss, never an answer's KV.
//
// One connection, its commands serialised by a mutex (the loader's threads may share the store).
// A failed command (the server gone, a timeout, a protocol error) is counted and reads as a miss;
// the tier then stays away from the server for a few seconds and reconnects on the next command
// after that, so a server restarted mid-run is used again and a dead one costs one timeout per
// pause, not one per chunk.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

struct redisContext;

namespace ragkv {

// redis://host[:port][/db]: port 6379 and database 0 by default.
struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string url() const;
};
// Error naming the URL and the expected form when it is not one.
RedisAddress parse_redis_url(const std::string& url);

// What the tier did in a run (the summaries' "remote" object).
struct RemoteTierStats {
  uint64_t gets = 0, hits = 0, misses = 0;  // misses: no such key (never stored, or evicted)
  uint64_t bad = 0;                         // values that failed the store's checks: not used
  uint64_t errors = 0;                      // commands that failed (server gone, timeout): read as misses
  uint64_t puts = 0, put_errors = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  double read_ms = 0;  // wall time of the reads (GET and the variant sets), for the load bandwidth
  nlohmann::json to_json() const;
};

class RedisTier {
 public:
  // Connects (and selects the database): Error naming the URL when the server cannot be reached,
  // so a mistyped address fails at the start instead of turning every chunk into a miss.
  // timeout: of the connection and of each command.
  explicit RedisTier(const std::string& url, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~RedisTier();
  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  // The value under key; nullopt when there is none, the command failed (counted apart), or the
  // store refused this key's value earlier in the run (not asked again).
  std::optional<std::string> get(const std::string& key);
  // Stores value under key; false when the command failed (counted; the server's own error, e.g.
  // OOM under maxmemory with noeviction, included).
  bool set(const std::string& key, std::string_view value);
  // The set under key: add a member, read the members (empty on a failure).
  bool add_member(const std::string& key, const std::string& member);
  std::vector<std::string> members(const std::string& key);

  // A value the store refused (its checks failed): counted, named once on stderr, and not asked
  // for again by this process.
  void count_bad(const std::string& key, const std::string& why);
  RemoteTierStats stats() const;
  const std::string& url() const { return url_; }

 private:
  // The connection, (re)made when absent and the pause after a failure has passed; nullptr when
  // there is none to use now.
  redisContext* connection();
  // Runs argv; nullptr on a failed command (counted, connection dropped). The caller frees the reply.
  void* command(const std::vector<std::string_view>& argv);
  void disconnect_after_failure(const std::string& why);
  bool connect(std::string* why);

  std::string url_;
  RedisAddress address_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  redisContext* c_ = nullptr;
  std::chrono::steady_clock::time_point retry_after_{};
  bool warned_ = false, warned_bad_ = false;
  RemoteTierStats stats_;
  std::set<std::string> refused_;
};

}  // namespace ragkv
