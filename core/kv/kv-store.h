// STORE_DIR (DESIGN.md §1 "Files"): chunk-KV files (core/kv/chunk-kv-file.h) under kv/, named by
// content address, and store.json naming the model, shape, KV encoding and canonical prefix they
// belong to.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/kv/chunk-kv-file.h"
#include "core/kv/redis-tier.h"
#include "core/kv/verified-record.h"

namespace ragkv {

// store.json
struct KvStoreInfo {
  int format_version = 1;  // 1: f16 caches; 2: quantised (builds before version 2 refuse the store)
  std::string model_fingerprint, model_name;  // model_name: e.g. the GGUF file name, for people
  uint32_t n_layer = 0, n_kv_head = 0, head_dim = 0;
  // The store's KV encoding (`precompute --kv-bits`): "f16", "q8" or "q4" (core/kv/kv-quant.h). A store
  // has one; open_for_write takes "" as "the existing store's, else f16".
  std::string dtype = "f16";
  std::string prefix;  // the canonical prefix description precompute used
  KvEncoding encoding() const { return KvEncoding::from_name(dtype); }
  bool operator==(const KvStoreInfo&) const = default;
};

// STORE_DIR: chunk-cache files under kv/, named by content address, plus store.json.
class KvStore {
 public:
  // Creates dir and dir/kv if needed. Error when store.json belongs to another model (or has
  // another shape, or another dtype than a non-empty info.dtype: a store has one KV encoding).
  // store.json is written atomically when missing, and rewritten when its prefix or model_name
  // differ from info.
  static KvStore open_for_write(const std::filesystem::path& dir, const KvStoreInfo& info);
  // Error when dir or store.json is missing or malformed. Another model's store opens as
  // foreign(): every chunk then reads as missing.
  static KvStore open_for_read(const std::filesystem::path& dir, const std::string& model_fingerprint);

  const KvStoreInfo& info() const { return info_; }
  bool foreign() const { return foreign_; }
  // Signed caches (core/kv/store-key.h): from now on put signs every file, and every file opened
  // (open_chunk, variants, has_valid) must carry a signature made with key, else it is bad.
  void set_key(std::shared_ptr<const StoreKey> key) { key_ = std::move(key); }
  const StoreKey* key() const { return key_.get(); }
  // A remote tier below the local disk (core/kv/redis-tier.h): put writes each chunk cache and
  // variant through to it (not the knowledge tree's chain nodes, which the local tiers manage),
  // and a file missing locally is looked up there — by has_valid, open_chunk and variants — under
  // "ragkv:<dtype>:<file name>" (the name is the content address, the model fingerprint
  // included); a value is installed in kv/ only after it passes every check a local file passes
  // (header against the expected chunk, every layer's checksum, the signature with a key), else it
  // is counted bad and the chunk is computed. A chunk's variant names are the set
  // "ragkv:<dtype>:variants:<16 hex>".
  void set_remote(std::shared_ptr<RedisTier> remote) { remote_ = std::move(remote); }
  RedisTier* remote() const { return remote_.get(); }
  const std::filesystem::path& dir() const { return dir_; }

  // kv/<16 hex>.rkv, the hex being XXH64 over model_fingerprint, prefix, chunk_id, token_hash;
  // a variant (non-empty context) is kv/<the same 16 hex>.<16 hex of its context>.rkv, so a
  // chunk's variants are found by name and each is a file of its own (created atomically: two
  // processes adding variants never lose one). An exact knowledge-tree node (m.exact_chain) is
  // kv/<16 hex>.<16 hex of its chain>.chain.rkv: never listed as a Cache-Craft variant, never
  // confused with a variant of the same context computed approximately. A donor cache (m.donor
  // non-empty, core/rag/donor-reuse.h) is kv/<16 hex>.donor.rkv: beside the canonical cache's
  // name, never taken for it.
  std::filesystem::path chunk_path(const ChunkKvMeta& m) const;
  // The headers of every variant of canonical's chunk (context non-empty), verified; files that
  // fail their header checks are counted in *bad and skipped. Read from a listing of kv/ taken
  // on first use (variants another process adds later are seen by the next run).
  std::vector<ChunkKvReader> variants(const ChunkKvMeta& canonical, int* bad = nullptr) const;
  // The file exists, its header verifies against m and every layer passes its checksum: read
  // in full once, then taken from STORE/verified.log while the file is unchanged
  // (core/kv/verified-record.h). precompute recomputes a chunk for which this is false.
  bool has_valid(const ChunkKvMeta& m) const;
  // STORE/verified.log (put records each file it writes; has_valid each file it verifies).
  const VerifiedRecord& verified_record() const { return *verified_; }
  // Error when the store is foreign or m's model/shape differ from the store's. Written in
  // encoding_for(m). stats: a variant's Cache-Craft metadata (core/kv/chunk-kv-file.h).
  void put(const ChunkKvMeta& m, std::span<const uint16_t* const> k, std::span<const uint16_t* const> v,
           const VariantStats* stats = nullptr) const;
  // The encoding put writes m in: the store's for chunk caches and Cache-Craft variants; f16 for
  // the instruction prefix (one small file every prompt starts with) and for exact
  // knowledge-tree chain nodes, whose whole point is being bit-identical to full's KV. Readers
  // take each file's own encoding from its header.
  KvEncoding encoding_for(const ChunkKvMeta& m) const;
  // Bytes of m's K and V as put would store them (layer blocks, checksums and header excluded).
  uint64_t kv_bytes(const ChunkKvMeta& m) const;
  // nullopt when no file exists for m (or the store is foreign); CacheFileError when it is bad.
  std::optional<ChunkKvReader> open_chunk(const ChunkKvMeta& m) const;
  // Count and total bytes of kv/*.rkv files.
  std::pair<size_t, uint64_t> usage() const;
  // Removes temporaries of writers that no longer run (killed mid-write); open_for_write calls it.
  size_t remove_stale_temporaries() const;

 private:
  std::filesystem::path dir_;
  KvStoreInfo info_;
  bool foreign_ = false;
  // variant file names by their chunk's 16-hex stem; listed on first use, extended by put
  mutable std::map<std::string, std::vector<std::string>> variant_files_;
  mutable bool listed_ = false;
  std::shared_ptr<const VerifiedRecord> verified_;
  std::shared_ptr<const StoreKey> key_;
  std::shared_ptr<RedisTier> remote_;
  mutable std::set<std::string> remote_variants_asked_;  // chunk stems whose remote variant set was read
  // Installs p (a cache missing locally) from the remote tier when it holds a value that verifies
  // as m (any_context: as one of m's variants); false otherwise (no tier, a miss, a bad value).
  bool fetch_remote(const ChunkKvMeta& m, const std::filesystem::path& p, bool any_context) const;
  void fetch_remote_variants(const ChunkKvMeta& canonical) const;  // once per chunk: its variants on the remote tier
  std::string remote_key(const std::string& file_name) const;
  // r, after its signature is checked when the store has a key (CacheFileError when it fails).
  ChunkKvReader checked(ChunkKvReader r) const;
  std::string chunk_stem(const ChunkKvMeta& m) const;
};

}  // namespace ragkv
