// STORE/variants.lock: the exclusive flock that serialises the read-modify-write of a store's
// bookkeeping files (craft.json, variant-usage.json) with the admission and eviction of the files
// they describe (core/kv/variant-ledger.h, core/kv/store-gc.h). flock excludes between processes on one
// machine; on a network file system it may not. A process must not take it twice (two open file
// descriptions of one file conflict with each other).
#pragma once
#include <filesystem>

namespace ragkv {

class StoreLock {
 public:
  explicit StoreLock(const std::filesystem::path& store_dir);  // blocks until held
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ragkv
