// RedisTier: one hiredis connection, its failures counted and paused over (core/kv/redis-tier.h).
#include "core/kv/redis-tier.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <cstdio>

#include "core/util/error.h"

namespace ragkv {

namespace {

// After a failed command the tier leaves the server alone this long before reconnecting.
constexpr std::chrono::seconds kRetryPause{3};

timeval to_timeval(std::chrono::milliseconds t) {
  return timeval{time_t(t.count() / 1000), suseconds_t((t.count() % 1000) * 1000)};
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

bool parse_int(std::string_view s, int lo, int hi, int* out) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

std::string RedisAddress::url() const { return "redis://" + host + ":" + std::to_string(port) + "/" + std::to_string(db); }

RedisAddress parse_redis_url(const std::string& url) {
  auto bad = [&](const char* why) -> RedisAddress {
    fail("--remote {}: {}; expected redis://host[:port][/db], e.g. redis://127.0.0.1:6379/0", url, why);
  };
  constexpr std::string_view scheme = "redis://";
  if (!url.starts_with(scheme)) return bad("not a redis:// URL");
  std::string_view rest = std::string_view(url).substr(scheme.size());
  RedisAddress a;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    if (!parse_int(rest.substr(slash + 1), 0, 1 << 20, &a.db)) return bad("the database is not a number");
    rest = rest.substr(0, slash);
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (!parse_int(rest.substr(colon + 1), 1, 65535, &a.port)) return bad("the port is not a number from 1 to 65535");
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad("no host");
  if (rest.find('@') != std::string_view::npos) return bad("credentials in the URL are not supported");
  a.host = std::string(rest);
  return a;
}

nlohmann::json RemoteTierStats::to_json() const {
  return {{"gets", gets},   {"hits", hits},     {"misses", misses},         {"bad", bad},
          {"errors", errors}, {"puts", puts},   {"put_errors", put_errors}, {"bytes_read", bytes_read},
          {"bytes_written", bytes_written},     {"read_ms", read_ms},
          {"read_mb_per_s", read_ms > 0 ? nlohmann::json(double(bytes_read) / 1e6 / (read_ms / 1e3)) : nlohmann::json(nullptr)}};
}

RedisTier::RedisTier(const std::string& url, std::chrono::milliseconds timeout)
    : url_(url), address_(parse_redis_url(url)), timeout_(timeout) {
  std::string why;
  if (!connect(&why)) fail("--remote {}: {}", url_, why);
}

RedisTier::~RedisTier() {
  if (c_) redisFree(c_);
}

bool RedisTier::connect(std::string* why) {
  c_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, to_timeval(timeout_));
  if (!c_ || c_->err) {
    *why = c_ ? std::string(c_->errstr) : "cannot allocate a connection";
    if (c_) redisFree(c_);
    c_ = nullptr;
    return false;
  }
  redisSetTimeout(c_, to_timeval(timeout_));
  if (address_.db != 0) {
    Reply r(static_cast<redisReply*>(redisCommand(c_, "SELECT %d", address_.db)));
    if (!r || r->type == REDIS_REPLY_ERROR) {
      *why = r ? "SELECT " + std::to_string(address_.db) + ": " + std::string(r->str, r->len) : std::string(c_->errstr);
      redisFree(c_);
      c_ = nullptr;
      return false;
    }
  }
  return true;
}

redisContext* RedisTier::connection() {
  if (c_) return c_;
  if (std::chrono::steady_clock::now() < retry_after_) return nullptr;
  std::string why;
  if (!connect(&why)) {
    disconnect_after_failure(why);
    return nullptr;
  }
  return c_;
}

void RedisTier::disconnect_after_failure(const std::string& why) {
  ++stats_.errors;
  if (c_) redisFree(c_);
  c_ = nullptr;
  retry_after_ = std::chrono::steady_clock::now() + kRetryPause;
  if (!warned_) {
    warned_ = true;
    std::fprintf(stderr, "ragkv: warning: remote tier %s: %s: its chunks are computed instead (retried every %lld s; "
                 "counted in the summary's remote.errors)\n", url_.c_str(), why.c_str(), (long long)kRetryPause.count());
  }
}

void* RedisTier::command(const std::vector<std::string_view>& argv) {
  redisContext* c = connection();
  if (!c) {
    ++stats_.errors;
    return nullptr;
  }
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (std::string_view a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(args.size()), args.data(), lens.data()));
  if (!r) {
    disconnect_after_failure(c->errstr[0] ? c->errstr : "no reply");
    return nullptr;
  }
  return r;
}

std::optional<std::string> RedisTier::get(const std::string& key) {
  std::lock_guard lock(mu_);
  if (refused_.count(key)) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  ++stats_.gets;
  Reply r(static_cast<redisReply*>(command({"GET", key})));
  stats_.read_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!r) return std::nullopt;
  if (r->type == REDIS_REPLY_STRING) {
    ++stats_.hits;
    stats_.bytes_read += r->len;
    return std::string(r->str, r->len);
  }
  if (r->type == REDIS_REPLY_NIL) {
    ++stats_.misses;
    return std::nullopt;
  }
  // A server error (e.g. WRONGTYPE: another program's value under our key) reads as a miss.
  ++stats_.errors;
  return std::nullopt;
}

bool RedisTier::set(const std::string& key, std::string_view value) {
  std::lock_guard lock(mu_);
  ++stats_.puts;
  Reply r(static_cast<redisReply*>(command({"SET", key, value})));
  if (!r || r->type == REDIS_REPLY_ERROR) {
    ++stats_.put_errors;
    if (r && !warned_) {
      warned_ = true;
      std::fprintf(stderr, "ragkv: warning: remote tier %s: SET %s: %.*s (counted in remote.put_errors; the local store keeps it)\n",
                   url_.c_str(), key.c_str(), int(r->len), r->str);
    }
    return false;
  }
  stats_.bytes_written += value.size();
  return true;
}

bool RedisTier::add_member(const std::string& key, const std::string& member) {
  std::lock_guard lock(mu_);
  Reply r(static_cast<redisReply*>(command({"SADD", key, member})));
  if (!r || r->type == REDIS_REPLY_ERROR) {
    ++stats_.put_errors;
    return false;
  }
  return true;
}

std::vector<std::string> RedisTier::members(const std::string& key) {
  std::lock_guard lock(mu_);
  const auto t0 = std::chrono::steady_clock::now();
  Reply r(static_cast<redisReply*>(command({"SMEMBERS", key})));
  stats_.read_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> out;
  if (!r) return out;
  if (r->type != REDIS_REPLY_ARRAY) {
    ++stats_.errors;
    return out;
  }
  for (size_t i = 0; i < r->elements; ++i)
    if (r->element[i]->type == REDIS_REPLY_STRING) out.emplace_back(r->element[i]->str, r->element[i]->len);
  return out;
}

void RedisTier::count_bad(const std::string& key, const std::string& why) {
  std::lock_guard lock(mu_);
  ++stats_.bad;
  refused_.insert(key);
  if (!warned_bad_) {
    warned_bad_ = true;
    std::fprintf(stderr, "ragkv: warning: remote tier %s: %s failed its checks (%s): not used, computed instead "
                 "(counted in remote.bad)\n", url_.c_str(), key.c_str(), why.c_str());
  }
}

RemoteTierStats RedisTier::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace ragkv
