// The Redis chunk-KV tier (core/kv/redis-tier.h, KvStore's remote) against a real redis-server on
// 127.0.0.1 (a free port, a temp dir, no persistence), through the binary on a tiny random model:
// precompute writes through and an empty store fills from the tier; then the faults — values
// evicted under maxmemory, the server killed in the middle of a reply, values overwritten with
// another chunk's bytes or truncated; and bench reuse's remote tier. Each run's answers must equal a clean local run's over the
// caches it could use (the files it installed: a refused or missing value is a chunk computed, as
// a file absent from a local store is), and each fault must be counted in the summary's "remote".
// Without redis-server the cases say "skipped" (ctest: Skipped), except under RAGKV_REQUIRE_REDIS=1
// (.ci/run), where that fails.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/reuse-bench.h"
#include "core/backend/cpu-backend.h"
#include "core/kv/chunk-kv-file.h"
#include "core/kv/redis-tier.h"
#include "core/model/random-model.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr auto q = &ragkv::test::shell_quote;
using ragkv::test::store_files;

bool have_redis_server() { return std::system("command -v redis-server >/dev/null 2>&1") == 0; }

// True when the case cannot run here (no redis-server): says so, and fails where it must run.
bool skip_without_redis() {
  if (have_redis_server()) return false;
  const char* require = std::getenv("RAGKV_REQUIRE_REDIS");
  if (require && std::string(require) == "1") FAIL("RAGKV_REQUIRE_REDIS=1 but redis-server is not installed (make setup installs it)");
  MESSAGE("skipped: redis-server is not installed (make setup installs it)");
  return true;
}

// A port nobody listens on now (the kernel's choice for port 0).
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(s);
  return ntohs(a.sin_port);
}

// redis-server in the foreground on 127.0.0.1, killed and reaped with the object.
struct RedisServer {
  pid_t pid = -1;
  int port = 0;

  RedisServer(const fs::path& dir, const std::string& maxmemory = "") {
    for (int attempt = 0; attempt < 5 && pid < 0; ++attempt) {  // another process may take the port first
      port = free_port();
      std::vector<std::string> args = {"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no", "--dir", dir.string(),
                                       "--logfile", (dir / "redis.log").string()};
      if (!maxmemory.empty()) args.insert(args.end(), {"--maxmemory", maxmemory, "--maxmemory-policy", "allkeys-lru"});
      const pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execvp("redis-server", argv.data());
        ::_exit(127);
      }
      for (int i = 0; i < 100; ++i) {  // up to 5 s for it to answer
        if (ping()) {
          pid = child;
          break;
        }
        int status = 0;
        if (::waitpid(child, &status, WNOHANG) == child) break;  // exited (the port was taken): try another
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (pid < 0) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
      }
    }
    REQUIRE_MESSAGE(pid > 0, "redis-server did not start; its log: " << dir / "redis.log");
  }
  ~RedisServer() { kill(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  void kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  std::string url() const { return fmt::format("redis://127.0.0.1:{}", port); }
  bool ping() const {
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port, timeval{0, 200000});
    bool ok = false;
    if (c && !c->err) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
      ok = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return ok;
  }
  // The keys matching pattern.
  std::vector<std::string> keys(const std::string& pattern) const {
    redisContext* c = redisConnect("127.0.0.1", port);
    REQUIRE((c && !c->err));
    auto* r = static_cast<redisReply*>(redisCommand(c, "KEYS %s", pattern.c_str()));
    std::vector<std::string> out;
    if (r && r->type == REDIS_REPLY_ARRAY)
      for (size_t i = 0; i < r->elements; ++i) out.emplace_back(r->element[i]->str, r->element[i]->len);
    if (r) freeReplyObject(r);
    redisFree(c);
    return out;
  }
};

// Between ragkv and a real server: passes bytes both ways until the server has sent `cut_after`
// bytes in all, then passes on only part of that read, kills the server (SIGKILL) and closes the
// client's connection — the server dies in the middle of a reply, deterministically. Later
// connections are refused (the listener is closed).
struct CuttingProxy {
  int listener = -1, port = 0;
  std::thread thread;
  std::atomic<bool> cut{false};

  CuttingProxy(RedisServer& server, size_t cut_after) {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    REQUIRE(::listen(listener, 4) == 0);
    thread = std::thread([this, &server, cut_after] { run(server, cut_after); });
  }
  ~CuttingProxy() {
    if (listener >= 0) ::shutdown(listener, SHUT_RDWR);
    if (thread.joinable()) thread.join();
    if (listener >= 0) ::close(listener);
  }
  std::string url() const { return fmt::format("redis://127.0.0.1:{}", port); }

  void run(RedisServer& server, size_t cut_after) {
    const int client = ::accept(listener, nullptr, nullptr);
    if (client < 0) return;
    const int upstream = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(server.port));
    if (::connect(upstream, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(client);
      ::close(upstream);
      return;
    }
    size_t from_server = 0;
    char buf[65536];
    for (bool open = true; open;) {
      pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
      if (::poll(fds, 2, 10000) <= 0) break;
      if (fds[0].revents & (POLLIN | POLLHUP)) {
        const ssize_t n = ::read(client, buf, sizeof buf);
        open = n > 0 && ragkv::write_all(upstream, std::string_view(buf, size_t(n)));
      }
      if (open && (fds[1].revents & (POLLIN | POLLHUP))) {
        const ssize_t n = ::read(upstream, buf, sizeof buf);
        if (n <= 0) break;
        if (from_server + size_t(n) > cut_after) {  // the cut: part of this read, then the server dies
          ragkv::write_all(client, std::string_view(buf, size_t(n) / 2));
          server.kill();
          cut = true;
          break;
        }
        from_server += size_t(n);
        open = ragkv::write_all(client, std::string_view(buf, size_t(n)));
      }
    }
    ::shutdown(listener, SHUT_RDWR);  // no reconnection through the proxy
    ::close(client);
    ::close(upstream);
  }
};

// The answer records without their timings.
std::vector<json> answers_of(const fs::path& p) {
  std::vector<json> out = ragkv::test::read_jsonl(p);
  for (json& r : out) r.erase("metrics");
  return out;
}


// The rag-mini pipeline on a tiny model with one neighbour variant per chunk, its caches written
// through to a Redis server by a second precompute into a store of their own ("through").
struct RemoteFixture {
  ragkv::test::TempDir tmp{"redis-tier"};
  ragkv::test::TinyPipeline tiny = ragkv::test::make_tiny_pipeline(tmp.path, 1);
  std::string queries = q(ragkv::test::testdata("rag-mini.queries.jsonl"));

  // Another node's store: its store.json only (the model and encoding), no cache yet.
  fs::path empty_node(const std::string& name) const {
    const fs::path node = tmp.path / name;
    fs::create_directories(node);
    fs::copy_file(tiny.store / "store.json", node / "store.json");
    return node;
  }

  json precompute_through(const RedisServer& server, const fs::path& store) const {
    const ragkv::test::Run r = ragkv::test::run_ragkv("precompute --index " + q(tiny.index) + " --store " + q(store) +
                                                      " --neighbours 1 --remote " + server.url() + tiny.on_model);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return json::parse(r.out);
  }
  // answer in mode auto (canonical caches, variants and the prefix all read) into out; the
  // summary returned. remote: "" for none.
  json answer(const fs::path& store, const std::string& remote, const fs::path& out) const {
    const fs::path summary = out.string() + ".summary.json";
    const ragkv::test::Run r = ragkv::test::run_ragkv(
        "answer " + queries + " --index " + q(tiny.index) + " --store " + q(store) + " --top-k 3 --max-tokens 4 --mode auto" +
        (remote.empty() ? "" : " --remote " + remote) + " --out " + q(out) + " --summary " + q(summary) + tiny.on_model);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return json::parse(ragkv::read_file(summary));
  }
  // The run through the tier against a clean local run over the caches it installed: a copy of
  // the store it filled, answered without the tier.
  void check_equals_local_run(const fs::path& filled, const fs::path& answers) const {
    const fs::path copy = tmp.path / ("copy-of-" + filled.filename().string());
    fs::copy(filled, copy, fs::copy_options::recursive);
    const fs::path local = tmp.path / ("local-" + answers.filename().string());
    answer(copy, "", local);
    const auto a = answers_of(answers), b = answers_of(local);
    REQUIRE(a.size() == 12);
    CHECK(a == b);
  }
};

}  // namespace

TEST_CASE("redis tier: redis:// URLs, and errors that show the form") {
  const ragkv::RedisAddress a = ragkv::parse_redis_url("redis://cache.example:6380/2");
  CHECK(a.host == "cache.example");
  CHECK(a.port == 6380);
  CHECK(a.db == 2);
  CHECK(ragkv::parse_redis_url("redis://10.0.0.5").port == 6379);
  CHECK(ragkv::parse_redis_url("redis://10.0.0.5").db == 0);
  for (const char* bad : {"http://x:1", "redis://", "redis://h:0", "redis://h:70000", "redis://h:1/x", "redis://u:p@h:1"})
    CHECK_THROWS_WITH_AS(ragkv::parse_redis_url(bad), doctest::Contains("expected redis://host[:port][/db]"), ragkv::Error);
  // Nothing listens: an error at the start, naming the URL (not a run of silent misses).
  const std::string url = fmt::format("redis://127.0.0.1:{}", free_port());
  CHECK_THROWS_WITH_AS(ragkv::RedisTier{url}, doctest::Contains(("--remote " + url).c_str()), ragkv::Error);
}

TEST_CASE("redis tier: precompute writes through, and an empty store fills from the tier and answers as the local store does" * doctest::test_suite("check")) {
  if (skip_without_redis()) return;
  const RemoteFixture f;
  RedisServer server(f.tmp.path);
  const json through = f.precompute_through(server, f.tmp.path / "through");
  CHECK(through["remote"]["puts"].get<int>() == through["store_files"].get<int>());
  CHECK(through["remote"]["put_errors"] == 0);
  CHECK(server.keys("ragkv:f16:*.rkv").size() == through["store_files"].get<size_t>());
  // A precompute elsewhere (another node, an empty disk): everything from the tier, nothing computed.
  const json again = f.precompute_through(server, f.tmp.path / "node2");
  CHECK(again["computed"] == 0);
  CHECK(again["variants"]["computed"] == 0);
  CHECK(again["remote"]["hits"].get<int>() == through["store_files"].get<int>());
  CHECK(store_files(f.tmp.path / "node2") == store_files(f.tmp.path / "through"));  // byte for byte

  // answer on a third node: the same answers as on the store precompute filled locally.
  const fs::path node3 = f.empty_node("node3");
  const json s = f.answer(node3, server.url(), f.tmp.path / "remote.jsonl");
  f.answer(f.tiny.store, "", f.tmp.path / "local.jsonl");
  CHECK(answers_of(f.tmp.path / "remote.jsonl") == answers_of(f.tmp.path / "local.jsonl"));
  CHECK(s["remote"]["hits"].get<int>() > 0);
  CHECK(s["remote"]["bad"] == 0);
  CHECK(s["remote"]["errors"] == 0);
  CHECK(s["cache_bad"] == 0);
  // The variants came too (auto reads them): the node holds some.
  size_t variants = 0;
  for (const auto& [name, bytes] : store_files(node3)) variants += name.size() == 16 + 1 + 16 + 4;
  CHECK(variants > 0);
}

TEST_CASE("redis tier: values evicted under maxmemory are misses, computed, and counted" * doctest::test_suite("check")) {
  if (skip_without_redis()) return;
  const RemoteFixture f;
  RedisServer server(f.tmp.path, "1mb");  // the tiny model's 31 cache files are about 1.6 MB in all
  const json through = f.precompute_through(server, f.tmp.path / "through");
  const size_t kept = server.keys("ragkv:f16:*.rkv").size();
  CHECK(kept < through["store_files"].get<size_t>());  // evicted (LRU) to stay within 1 MB
  const fs::path node = f.empty_node("node");
  const json s = f.answer(node, server.url(), f.tmp.path / "evicted.jsonl");
  CHECK(s["remote"]["misses"].get<int>() > 0);
  CHECK(s["remote"]["bad"] == 0);
  f.check_equals_local_run(node, f.tmp.path / "evicted.jsonl");
}

TEST_CASE("redis tier: the server killed in the middle of a reply: the run ends with correct answers and counted errors" * doctest::test_suite("check")) {
  if (skip_without_redis()) return;
  const RemoteFixture f;
  RedisServer server(f.tmp.path);
  f.precompute_through(server, f.tmp.path / "through");
  const fs::path node = f.empty_node("node");
  // Cut once 200 kB have come back: within the first few cache files (about 100 kB each).
  CuttingProxy proxy(server, 200'000);
  const json s = f.answer(node, proxy.url(), f.tmp.path / "cut.jsonl");
  CHECK(proxy.cut);
  CHECK(s["remote"]["errors"].get<int>() >= 1);
  CHECK(s["remote"]["hits"].get<int>() >= 1);  // some values arrived before the cut
  CHECK(s["remote"]["bad"] == 0);              // the cut value was never handed to the store
  f.check_equals_local_run(node, f.tmp.path / "cut.jsonl");
}

TEST_CASE("redis tier: a value overwritten with another chunk's bytes, or truncated, is refused, computed, and counted" * doctest::test_suite("check")) {
  if (skip_without_redis()) return;
  const RemoteFixture f;
  RedisServer server(f.tmp.path);
  f.precompute_through(server, f.tmp.path / "through");
  // The canonical chunk caches (<16 hex>.rkv) a clean run through the tier installs are the ones
  // the queries use: the first of them takes the second's bytes, the third is cut short.
  const fs::path probe = f.empty_node("probe");
  f.answer(probe, server.url(), f.tmp.path / "probe.jsonl");
  std::vector<std::string> canonical;
  const std::string prefix = "ragkv:f16:";
  for (const auto& [name, bytes] : store_files(probe))
    if (name.size() == 16 + 4 && ragkv::ChunkKvReader(probe / "kv" / name).meta().chunk_id != ragkv::kPrefixChunkId)
      canonical.push_back(prefix + name);
  REQUIRE(canonical.size() >= 3);
  {
    ragkv::RedisTier tier(server.url());
    const auto second = tier.get(canonical[1]), third = tier.get(canonical[2]);
    REQUIRE((second && third));
    REQUIRE(tier.set(canonical[0], *second));
    REQUIRE(tier.set(canonical[2], third->substr(0, third->size() - 100)));
  }
  const fs::path node = f.empty_node("node");
  const json s = f.answer(node, server.url(), f.tmp.path / "planted.jsonl");
  CHECK(s["remote"]["bad"] == 2);
  CHECK(s["cache_bad"] == 0);  // refused before the store saw them: never a bad cache in an answer
  // Neither is installed; the honest values are.
  const auto files = store_files(node);
  CHECK(files.size() == store_files(probe).size() - 2);
  CHECK(files.count(canonical[0].substr(prefix.size())) == 0);
  CHECK(files.count(canonical[2].substr(prefix.size())) == 0);
  f.check_equals_local_run(node, f.tmp.path / "planted.jsonl");
}

TEST_CASE("redis tier: bench reuse --tiers remote fetches every cache before each prefill, its time in the TTFT" *
          doctest::test_suite("check")) {
  if (skip_without_redis()) return;
  const ragkv::test::TempDir tmp("bench-remote");
  RedisServer server(tmp.path);
  ragkv::RandomModelSpec spec;
  spec.n_layer = 3;
  spec.n_ctx = 1024;
  ragkv::ReuseBenchOptions o;
  o.model_path = (tmp.path / "random-llama.gguf").string();
  ragkv::write_random_model(spec, o.model_path);
  o.threads = 1;
  o.chunks = 3;
  o.chunk_tokens = 32;
  o.repetitions = 2;
  o.store_dir = (tmp.path / "store").string();
  o.modes = {ragkv::ModeSpec(ragkv::ReuseMode::reuse)};
  o.tiers = {ragkv::KvStart::page_cache, ragkv::KvStart::remote};
  o.remote = server.url();
  const json j = ragkv::bench_reuse(*ragkv::make_cpu_backend(1), o);
  REQUIRE(j["results"].size() == 2);
  const json& local = j["results"][0];
  const json& remote = j["results"][1];
  CHECK(remote["kv_tier"] == "remote");
  // The same KV, so the same first token; every cache (3 chunks and the prefix) fetched at the
  // warm-up and at each of the 2 timed prefills, none refused.
  CHECK(remote["kl_first_token_vs_full"] == local["kl_first_token_vs_full"]);
  CHECK(remote["remote"]["hits"].get<int>() >= 4 * 3);
  CHECK(remote["remote"]["bad"] == 0);
  CHECK(remote["plan_ms_median"].get<double>() > 0);
  CHECK(remote["ttft_ms_median"].get<double>() >= remote["plan_ms_median"].get<double>());
  o.remote.clear();
  CHECK_THROWS_WITH_AS(ragkv::bench_reuse(*ragkv::make_cpu_backend(1), o), doctest::Contains("--remote redis://"), ragkv::Error);
}
