// The device-check records `--device auto` trusts (core/eval/device-record.h).
#include "core/eval/device-record.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <ctime>
#include <exception>

#include "core/util/error.h"
#include "core/util/file-io.h"

namespace ragkv {

namespace {

constexpr const char* kFormat = "ragkv-device-check/1";

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::filesystem::path device_records_dir() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  if (const std::string d = env("RAGKV_DEVICE_RECORDS"); !d.empty()) return d;
  if (const std::string d = env("XDG_CACHE_HOME"); !d.empty()) return std::filesystem::path(d) / "ragkv" / "devices";
  if (const std::string d = env("HOME"); !d.empty()) return std::filesystem::path(d) / ".cache" / "ragkv" / "devices";
  return {};
}

std::filesystem::path device_record_path(const std::filesystem::path& dir, const std::string& kernels) {
  std::string name = kernels;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
  return dir / (name + ".json");
}

void write_device_record(const std::filesystem::path& dir, const std::string& kernels, const std::string& binary,
                         bool passed, const nlohmann::json& report) {
  if (dir.empty()) fail("device-check: nowhere to keep its record (set RAGKV_DEVICE_RECORDS, XDG_CACHE_HOME or HOME)");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the device-check records directory: {}", dir.string(), ec.message());
  const nlohmann::json record = {{"format", kFormat}, {"kernels", kernels},   {"binary", binary},
                                 {"passed", passed},  {"checked_at", utc_now_iso()}, {"report", report}};
  write_file_atomic(device_record_path(dir, kernels), {record.dump(1) + "\n"});
}

DeviceVerdict device_qualified(const std::filesystem::path& dir, const std::string& kernels,
                               const std::string& binary) {
  if (dir.empty()) return {false, "no device-check records directory (HOME is not set)"};
  const std::filesystem::path path = device_record_path(dir, kernels);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return {false, fmt::format("`ragkv device-check` has not run on {}", kernels)};
  try {
    const nlohmann::json r = nlohmann::json::parse(read_regular_file(path));
    if (!r.is_object() || r.value("format", "") != kFormat || r.value("kernels", "") != kernels)
      return {false, fmt::format("{}: not a device-check record of {}", path.string(), kernels)};
    if (r.value("binary", "") != binary)
      return {false, fmt::format("the device-check record of {} is from another ragkv build", kernels)};
    if (!r.value("passed", false))
      return {false, fmt::format("`ragkv device-check` failed on {} ({})", kernels, r.value("checked_at", "?"))};
    return {true, ""};
  } catch (const std::exception& e) {
    return {false, fmt::format("{}: unreadable device-check record ({})", path.string(), e.what())};
  }
}

}  // namespace ragkv
