// Reading a whole store (`ragkv store verify | repair | stats`): every chunk-KV file
// under kv/ checked the way answer would use it — header and its checksum, size, the model and
// shape of store.json, the name being the content address of what the header holds — and, for
// verify, every layer's checksum; the claims of workers on the store, live or stale. repair
// removes what fails (the next precompute, or `store repair --index`, computes those chunks
// again), the temporaries of dead writers and stale claims.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/kv/kv-store.h"

namespace ragkv {

// Where repair moves what it cannot judge: entries at cache names that are not regular files.
inline constexpr const char* kSetAsideDir = "set-aside";

struct StoreFileReport {
  std::string name;               // under kv/
  uint64_t bytes = 0;
  FileStamp stamp;                // when it was checked (repair leaves a file that changed since)
  bool variant = false;           // a Cache-Craft variant (computed after other chunks)
  bool prefix = false;            // the instruction prefix ("@prefix")
  std::string model_fingerprint;  // from its header; "" when the header is unreadable
  std::string dtype;              // its KV encoding (core/kv/kv-quant.h: f16, q8, q4), from its header
  uint32_t n_tokens = 0;          // from its header
  std::string problem;            // "" when intact, else what is wrong (one line)
  bool regular = true;            // false: a directory, FIFO, link... at a cache's name (repair moves it aside)
};

struct StoreReport {
  std::vector<StoreFileReport> files;           // kv/*.rkv, by name
  std::vector<std::string> stale_temporaries;   // kv/ temporaries of writers that no longer run
  std::vector<std::string> claims;              // kv/*.rkv.claim of live workers (core/kv/claim-set.h)
  std::vector<std::string> stale_claims;        // claims whose owner is gone or whose heartbeat stopped
  std::vector<std::string> unknown;             // other files in kv/ (left alone)
  bool every_layer = false;                     // layers were read (verify), not headers only (stats)
  size_t bad() const;
};

// Opens an existing store as the model it names (no model file needed): for inspection.
KvStore open_store_for_inspection(const std::filesystem::path& dir);

// every_layer: read each file in full (verify); otherwise headers only (stats).
// progress(done, total) after each file.
StoreReport inspect_store(const KvStore& store, bool every_layer,
                          const std::function<void(size_t, size_t)>& progress = {});

// Removes the report's bad files, stale temporaries and stale claims (each judged again first), and rewrites STORE/verified.log with the
// intact files (report from a full inspection only). What is not a regular file at a cache's name
// (a directory, FIFO or link planted there) is not ragkv's to delete: it is moved to
// STORE/set-aside/ (kSetAsideDir) so that the cache can be written again. Returns the number of entries removed or moved.
size_t remove_bad_files(const KvStore& store, const StoreReport& report);

}  // namespace ragkv
