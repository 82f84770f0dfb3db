// VariantLedger: craft.json, variant-usage.json and budgeted admission under one flock.
#include "core/kv/variant-ledger.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/kv/store-lock.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace ragkv {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSettings = "craft.json";
constexpr const char* kUsage = "variant-usage.json";

bool is_variant_name(const std::string& name) {
  return name.size() == 16 + 1 + 16 + 4 && name[16] == '.' && name.ends_with(".rkv");
}

std::map<std::string, double> read_usage(const fs::path& path) {
  std::map<std::string, double> out;
  if (!fs::exists(path)) return out;
  const json j = read_store_json_file(path);
  try {
    for (const auto& [name, v] : j.at("frequency_reuse").items()) out[name] = v.get<double>();
  } catch (const json::exception& e) {
    fail("{}: malformed variant usage: {}", path.string(), e.what());
  }
  return out;
}

void write_usage(const fs::path& path, const std::map<std::string, double>& f) {
  json j = {{"format", "ragkv-variant-usage"}, {"frequency_reuse", json::object()}};
  for (const auto& [name, v] : f) j["frequency_reuse"][name] = v;
  write_file_atomic(path, {j.dump() + "\n"});
}

std::vector<VariantFile> list_variants(const KvStore& store, const std::map<std::string, double>& usage) {
  std::vector<VariantFile> out;
  std::error_code ec;
  for (fs::directory_iterator it(store.dir() / "kv", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_variant_name(name)) continue;
    std::error_code fec;
    VariantFile f;
    f.name = name;
    f.bytes = it->file_size(fec);
    if (fec) continue;  // removed meanwhile
    f.mtime_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(it->last_write_time(fec).time_since_epoch()).count();
    if (const auto u = usage.find(name); u != usage.end()) f.frequency_reuse = u->second;
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

CraftStoreSettings read_craft_settings(const KvStore& store) {
  CraftStoreSettings s;
  const fs::path p = store.dir() / kSettings;
  if (!fs::exists(p)) return s;
  const json j = read_store_json_file(p);
  try {
    if (j.contains("alpha") && !j["alpha"].is_null()) s.alpha = j["alpha"].get<double>();
    s.alpha_fit = j.value("alpha_fit", json());
    if (j.contains("fallback") && !j["fallback"].is_null()) s.fallback = j["fallback"].get<std::string>();
    s.fallback_fit = j.value("fallback_fit", json());
    if (j.contains("budget")) {
      const json& b = j["budget"];
      if (!b.is_object()) fail("{}: malformed craft settings: \"budget\" is not an object", p.string());
      if (b.contains("max_variants")) s.budget.max_variants = json_integer<size_t>(b["max_variants"]);
      if (b.contains("max_bytes")) s.budget.max_bytes = json_integer<uint64_t>(b["max_bytes"]);
    }
  } catch (const json::exception& e) {
    fail("{}: malformed craft settings: {}", p.string(), e.what());
  }
  if (s.alpha && !(*s.alpha >= 0 && *s.alpha <= 10)) fail("{}: alpha {} outside [0, 10]", p.string(), *s.alpha);
  return s;
}

void write_craft_settings(const KvStore& store, const CraftStoreSettings& s) {
  const StoreLock lock(store.dir());
  json j = {{"format", "ragkv-craft-settings"},
            {"alpha", s.alpha ? json(*s.alpha) : json(nullptr)},
            {"alpha_fit", s.alpha_fit},
            {"fallback", s.fallback.empty() ? json(nullptr) : json(s.fallback)},
            {"fallback_fit", s.fallback_fit},
            {"budget", {{"max_variants", s.budget.max_variants}, {"max_bytes", s.budget.max_bytes}}}};
  write_file_atomic(store.dir() / kSettings, {j.dump(2) + "\n"});
}

std::vector<VariantFile> eviction_order(std::vector<VariantFile> files) {
  std::sort(files.begin(), files.end(), [](const VariantFile& a, const VariantFile& b) {
    if (a.frequency_reuse != b.frequency_reuse) return a.frequency_reuse < b.frequency_reuse;
    if (a.mtime_ns != b.mtime_ns) return a.mtime_ns < b.mtime_ns;
    return a.name < b.name;
  });
  return files;
}

VariantLedger::VariantLedger(const KvStore& store) : store_(store) {}

VariantLedger::~VariantLedger() {
  try {
    flush();
  } catch (...) {  // a destructor must not throw; the uses are lost, the store stays intact
  }
}

void VariantLedger::record_use(const std::string& name, double cfo) {
  pending_[name] += 1.0 / std::max(cfo, 0.01);  // Cache-Craft §3.3: f_r += 1/CFO
}

void VariantLedger::flush() {
  if (pending_.empty() || store_.foreign()) return;
  const StoreLock lock(store_.dir());
  std::map<std::string, double> usage = read_usage(store_.dir() / kUsage);
  for (const auto& [name, add] : pending_) usage[name] += add;
  // Forget the scores of variants no longer on disk (evicted by another process).
  std::map<std::string, double> kept;
  for (const VariantFile& f : list_variants(store_, usage)) kept[f.name] = f.frequency_reuse;
  write_usage(store_.dir() / kUsage, kept);
  pending_.clear();
}

bool VariantLedger::admit(uint64_t bytes, const std::function<void()>& write, std::vector<std::string>* evicted) {
  const StoreLock lock(store_.dir());
  const VariantBudget b = read_craft_settings(store_).budget;
  if (b.max_bytes > 0 && bytes > b.max_bytes) return false;
  if (b.limited()) {
    std::map<std::string, double> usage = read_usage(store_.dir() / kUsage);
    for (const auto& [name, add] : pending_) usage[name] += add;
    std::vector<VariantFile> files = list_variants(store_, usage);
    uint64_t total = 0;
    for (const VariantFile& f : files) total += f.bytes;
    size_t count = files.size();
    for (const VariantFile& f : eviction_order(std::move(files))) {
      const bool over_count = b.max_variants > 0 && count + 1 > b.max_variants;
      const bool over_bytes = b.max_bytes > 0 && total + bytes > b.max_bytes;
      if (!over_count && !over_bytes) break;
      std::error_code ec;
      if (fs::remove(store_.dir() / "kv" / f.name, ec) || !fs::exists(store_.dir() / "kv" / f.name)) {
        --count;
        total -= f.bytes;
        usage.erase(f.name);
        pending_.erase(f.name);
        if (evicted) evicted->push_back(f.name);
      }
    }
    if ((b.max_variants > 0 && count + 1 > b.max_variants) || (b.max_bytes > 0 && total + bytes > b.max_bytes))
      return false;
    write_usage(store_.dir() / kUsage, usage);
  }
  write();
  return true;
}

std::vector<VariantFile> VariantLedger::files() const {
  const StoreLock lock(store_.dir());
  return list_variant_files_locked(store_);
}

std::vector<VariantFile> list_variant_files_locked(const KvStore& store) {
  return list_variants(store, read_usage(store.dir() / kUsage));
}

void prune_variant_usage_locked(const KvStore& store) {
  const fs::path p = store.dir() / kUsage;
  if (!fs::exists(p)) return;
  std::map<std::string, double> kept;
  for (const VariantFile& f : list_variants(store, read_usage(p))) kept[f.name] = f.frequency_reuse;
  write_usage(p, kept);
}

}  // namespace ragkv
