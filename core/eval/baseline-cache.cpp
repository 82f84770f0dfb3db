// Baseline answers kept between eval runs: keyed JSONL entries, read leniently (a cache: a bad
// entry is never used, only recomputed), appended under flock.
#include "core/eval/baseline-cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/format/checksum.h"
#include "core/util/base64.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace ragkv {

using nlohmann::json;

const std::string& engine_fingerprint() {
  static const std::string fp = [] {
    std::ifstream in("/proc/self/exe", std::ios::binary);
    if (!in) fail("cannot read /proc/self/exe to fingerprint the engine for --baseline-cache");
    Checksum64 h;
    std::vector<char> buf(1 << 20);
    while (in) {
      in.read(buf.data(), std::streamsize(buf.size()));
      h.update(buf.data(), size_t(in.gcount()));
    }
    return checksum_hex(h.digest());
  }();
  return fp;
}

std::string BaselineCache::key_hex(const BaselineKey& key) {
  Checksum64 h;
  const std::string text = fmt::format("engine={}\nmodel={}\nbaseline={}\nmax_tokens={}\nprompt={}\n", key.engine,
                                       key.model_fingerprint, key.baseline, key.max_tokens, checksum_hex(key.prompt_hash));
  h.update(text);
  return checksum_hex(h.digest());
}

namespace {

json record_json(const AnswerRecord& r) {
  const PrefillStats& p = r.prefill;
  return {{"mode", r.mode},
          {"answer", r.answer},
          {"chunks", r.chunk_ids},
          {"output_ids", r.output_ids},
          {"prefill", {{"prefill_ms", p.prefill_ms}, {"load_ms", p.load_ms}, {"load_wait_ms", p.load_wait_ms},
                       {"prompt_tokens", p.prompt_tokens}, {"computed_token_layers", p.computed_token_layers},
                       {"reused_tokens", p.reused_tokens},
                       {"recomputed_reused_token_layers", p.recomputed_reused_token_layers},
                       {"focus_cutoff_layer", p.focus_cutoff_layer}, {"focused_chunks", p.focused_chunks},
                       {"n_layer", p.n_layer}}},
          {"cache", {r.cache.device_hits, r.cache.host_hits, r.cache.disk_hits, r.cache.exact_hits, r.cache.misses,
                     r.cache.bad}},
          {"retrieval_ms", r.retrieval_ms},
          {"plan_ms", r.plan_ms},
          {"decode_ms", r.decode_ms}};
}

AnswerRecord record_of(const json& j, const std::string& logits_b64) {
  AnswerRecord r;
  r.mode = j.at("mode").get<std::string>();
  r.answer = j.at("answer").get<std::string>();
  r.chunk_ids = j.at("chunks").get<std::vector<std::string>>();
  r.output_ids = j.at("output_ids").get<std::vector<int32_t>>();
  const json& p = j.at("prefill");
  r.prefill.prefill_ms = p.at("prefill_ms").get<double>();
  r.prefill.load_ms = p.at("load_ms").get<double>();
  r.prefill.load_wait_ms = p.at("load_wait_ms").get<double>();
  r.prefill.prompt_tokens = p.at("prompt_tokens").get<int64_t>();
  r.prefill.computed_token_layers = p.at("computed_token_layers").get<int64_t>();
  r.prefill.reused_tokens = p.at("reused_tokens").get<int64_t>();
  r.prefill.recomputed_reused_token_layers = p.at("recomputed_reused_token_layers").get<int64_t>();
  r.prefill.focus_cutoff_layer = p.at("focus_cutoff_layer").get<int>();
  r.prefill.focused_chunks = p.at("focused_chunks").get<std::vector<int32_t>>();
  r.prefill.n_layer = p.at("n_layer").get<int>();
  const std::vector<int> c = j.at("cache").get<std::vector<int>>();
  if (c.size() != 6) throw std::runtime_error("cache counts");
  r.cache = {c[0], c[1], c[2], c[3], c[4], c[5]};
  r.retrieval_ms = j.at("retrieval_ms").get<double>();
  r.plan_ms = j.value("plan_ms", 0.0);  // (older records have none)
  r.decode_ms = j.at("decode_ms").get<double>();
  const std::optional<std::string> bytes = base64_decode(logits_b64);
  if (!bytes || bytes->size() % sizeof(float) != 0 || bytes->empty()) throw std::runtime_error("first_logits");
  r.first_logits.resize(bytes->size() / sizeof(float));
  std::memcpy(r.first_logits.data(), bytes->data(), bytes->size());
  return r;
}

}  // namespace

BaselineCache::BaselineCache(std::filesystem::path path) : path_(std::move(path)) {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) return;
  const std::string content = read_file(path_);
  size_t bad = 0;
  for_each_jsonl_line(content, [&](size_t, std::string_view line) {
    try {
      const json e = parse_json_line(line);
      entries_.insert_or_assign(e.at("key").get<std::string>(),
                                record_of(e.at("record"), e.at("first_logits").get<std::string>()));
    } catch (...) {  // a cut or damaged entry: never used; its baseline is computed again
      ++bad;
    }
  });
  if (bad > 0)
    std::fprintf(stderr, "ragkv: eval: %zu unreadable entries of %s ignored (their baselines are computed again)\n", bad,
                 path_.c_str());
}

std::optional<AnswerRecord> BaselineCache::find(const BaselineKey& key) const {
  const auto it = entries_.find(key_hex(key));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void BaselineCache::add(const BaselineKey& key, const std::string& query_id, const AnswerRecord& record) {
  if (!record.craft.empty()) fail("--baseline-cache keeps full and prefix baselines, not {}", record.mode);
  const std::string hex = key_hex(key);
  const std::string logits(reinterpret_cast<const char*>(record.first_logits.data()),
                           record.first_logits.size() * sizeof(float));
  const std::string line = json{{"key", hex}, {"id", query_id}, {"record", record_json(record)},
                                {"first_logits", base64_encode(logits)}}
                               .dump() +
                           '\n';
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot open for appending: {}", path_.string(), std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::flock(fd, LOCK_EX) != 0) fail("{}: cannot lock: {}", path_.string(), std::strerror(errno));
  auto write_all = [&](std::string_view bytes) {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("{}: cannot append: {}", path_.string(), std::strerror(errno));
      }
      done += size_t(n);
    }
  };
  // A line cut short by a killed writer is ended first, so this entry starts a line of its own.
  const off_t size = ::lseek(fd, 0, SEEK_END);
  char last = '\n';
  if (size > 0 && ::pread(fd, &last, 1, size - 1) == 1 && last != '\n') write_all("\n");
  write_all(line);
  entries_.insert_or_assign(hex, record);
}

}  // namespace ragkv
