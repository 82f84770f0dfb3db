// Measuring the tiers' read rates through the fusor's own calls, and their JSON form.
#include "core/kv/tier-read-rates.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/kv/chunk-kv-file.h"
#include "core/util/error.h"

namespace ragkv {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Best of `repetitions` timings of f (ms).
template <typename F>
double best_ms(int repetitions, F&& f) {
  double best = 0;
  for (int r = 0; r < std::max(1, repetitions); ++r) {
    const double t = f();
    best = r == 0 ? t : std::min(best, t);
  }
  return best;
}

// Every layer of every file read as the layer loader reads it (core/kv/segment-kv.h's disk tier).
double read_files_ms(const std::vector<ChunkKvReader>& files) {
  std::vector<uint16_t> staging;
  const auto t0 = Clock::now();
  for (const ChunkKvReader& f : files) {
    staging.resize(f.layer_bytes() / sizeof(uint16_t));
    const size_t half = staging.size() / 2;
    for (int l = 0; l < int(f.meta().n_layer); ++l) f.read_layer(l, staging.data(), staging.data() + half);
  }
  return ms_since(t0);
}

}  // namespace

double TierReadRates::read_ms(KvTier tier, uint64_t bytes, double resident) const {
  const double b = double(bytes);
  auto over = [&](double mb_s) { return mb_s > 0 ? b / (mb_s * 1e3) : 0.0; };  // 1 MB/s = 1e3 bytes per ms
  switch (tier) {
    case KvTier::device:
      return over(device_mb_s);
    case KvTier::host:
      return over(host_mb_s);
    case KvTier::disk: {
      const double r = std::clamp(resident, 0.0, 1.0);
      return r * over(disk_cached_mb_s) + (1 - r) * over(disk_cold_mb_s) + over(host_mb_s);
    }
  }
  return 0.0;
}

nlohmann::json TierReadRates::to_json() const {
  return {{"device_mb_s", device_mb_s},           {"host_mb_s", host_mb_s},
          {"disk_cached_mb_s", disk_cached_mb_s}, {"disk_cold_mb_s", disk_cold_mb_s},
          {"disk_cold_resident", disk_cold_resident}, {"kv_dtype", kv_dtype}};
}

TierReadRates TierReadRates::from_json(const nlohmann::json& j) {
  auto number = [&](const char* key) {
    const nlohmann::json* v = j.is_object() && j.contains(key) ? &j.at(key) : nullptr;
    if (!v || !v->is_number() || v->get<double>() < 0) fail("tier read rates: '{}' must be a number >= 0", key);
    return v->get<double>();
  };
  TierReadRates r;
  r.device_mb_s = number("device_mb_s");
  r.host_mb_s = number("host_mb_s");
  r.disk_cached_mb_s = number("disk_cached_mb_s");
  r.disk_cold_mb_s = number("disk_cold_mb_s");
  r.disk_cold_resident = number("disk_cold_resident");
  if (!j.contains("kv_dtype") || !j.at("kv_dtype").is_string()) fail("tier read rates: 'kv_dtype' must be a string");
  r.kv_dtype = j.at("kv_dtype").get<std::string>();
  if (r.device_mb_s <= 0 || r.host_mb_s <= 0) fail("tier read rates: the device and host rates must be > 0");
  return r;
}

TierReadRates measure_tier_read_rates(Backend& backend, const KvStore* store, size_t max_files, int repetitions) {
  TierReadRates r;
  // Memory tiers: 16 MiB of f16, a few chunks' worth of one layer on large models.
  constexpr int64_t kRows = 1024, kCols = 8192;
  const Tensor a = backend.alloc(DType::f16, kRows, kCols), b = backend.alloc(DType::f16, kRows, kCols);
  const double bytes = double(a.bytes());
  std::vector<uint16_t> host(size_t(a.numel()), 0x3c00);
  backend.upload(a, host.data());
  backend.copy(a, b);  // first touch of b
  backend.synchronize();
  r.device_mb_s = bytes / 1e3 / best_ms(repetitions + 2, [&] {
               const auto t0 = Clock::now();
               backend.copy(a, b);
               backend.synchronize();
               return ms_since(t0);
             });
  // From host memory pinned as the host tier's is (Backend::pin_host_memory): straight by DMA
  // where the backend can.
  backend.pin_host_memory(host.data(), host.size() * sizeof(uint16_t));
  struct Unpin {
    Backend& b;
    const void* p;
    ~Unpin() { b.unpin_host_memory(p); }
  } unpin{backend, host.data()};
  r.host_mb_s = bytes / 1e3 / best_ms(repetitions + 2, [&] {
             const auto t0 = Clock::now();
             backend.upload_async(b, host.data());
             backend.wait_uploads();
             backend.synchronize();
             return ms_since(t0);
           });

  if (!store || store->foreign()) return r;
  std::vector<fs::path> paths;
  std::error_code ec;
  for (fs::directory_iterator it(store->dir() / "kv", ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".rkv") paths.push_back(it->path());
  std::sort(paths.begin(), paths.end());  // the same files every time
  std::vector<ChunkKvReader> files;
  double file_bytes = 0;
  for (const fs::path& p : paths) {
    if (files.size() >= max_files) break;
    try {
      ChunkKvReader f = ChunkKvReader::open_any(p);
      file_bytes += double(f.layer_bytes()) * f.meta().n_layer;
      files.push_back(std::move(f));
    } catch (const Error&) {
      continue;  // a bad file is not a measurement
    }
  }
  if (files.empty()) return r;
  r.kv_dtype = store->info().dtype;
  read_files_ms(files);  // into the page cache
  r.disk_cached_mb_s = file_bytes / 1e3 / best_ms(repetitions, [&] { return read_files_ms(files); });
  double resident = 1;
  r.disk_cold_mb_s = file_bytes / 1e3 / best_ms(repetitions, [&] {
                  double sum = 0;
                  for (const ChunkKvReader& f : files) {
                    f.evict_page_cache();
                    sum += f.resident_fraction();
                  }
                  resident = std::min(resident, sum / double(files.size()));
                  return read_files_ms(files);
                });
  r.disk_cold_resident = resident;
  return r;
}

}  // namespace ragkv
