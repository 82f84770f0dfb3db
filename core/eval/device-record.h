// What `--device auto` trusts: the record `ragkv device-check` leaves of its verdict on one kind of
// chip with one build (issue 40 item 8: CUDA by default only where a GPU is present and the CUDA
// checks have passed on that kind of chip). One JSON file per backend identity
// (Backend::kernels(): the GPU's name and the weight storage), in the records directory:
//   {"format": "ragkv-device-check/1", "kernels": ..., "binary": XXH64 of the ragkv that checked,
//    "passed": bool, "checked_at": ISO 8601 UTC, "report": run_device_check's report}
// A record holds only for the binary that wrote it: a rebuilt ragkv has other kernels.
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace ragkv {

// $RAGKV_DEVICE_RECORDS; else $XDG_CACHE_HOME/ragkv/devices; else $HOME/.cache/ragkv/devices;
// empty when none of the three is set.
std::filesystem::path device_records_dir();

// The record file of a backend identity in dir (the identity with every character other than
// letters, digits, '.', '_' and '-' replaced by '-', then ".json").
std::filesystem::path device_record_path(const std::filesystem::path& dir, const std::string& kernels);

// Writes the record atomically (creating dir); Error naming the file when it cannot.
void write_device_record(const std::filesystem::path& dir, const std::string& kernels, const std::string& binary,
                         bool passed, const nlohmann::json& report);

struct DeviceVerdict {
  bool qualified = false;
  std::string reason;  // why not, for a one-line note ("no device-check has run …")
};

// Whether the record in dir says the backend `kernels` passed with `binary`. Never throws: a
// missing, unreadable or foreign record is "not qualified", with the reason.
DeviceVerdict device_qualified(const std::filesystem::path& dir, const std::string& kernels, const std::string& binary);

}  // namespace ragkv
