// A chunk-KV cache file (DESIGN.md §1 "Files", §4 "Chunk caches", §7): one chunk variant's K and
// V per layer under a header naming the model, chunk, prefix, shape, token ids and (version 4)
// the KV encoding. K is stored rotated for the positions it was computed at (first_pos onwards),
// not with RoPE removed (core/rag/precompute.h says why). Layout (little-endian):
//   "RKVCHKV\0" | u32 version | u32 header_len | header | u64 XXH64 of every byte before
//   header: str model_fingerprint, str chunk_id, str prefix (str = u32 length + bytes),
//           u32 n_layer, n_kv_head, head_dim, n_tokens, u64 token_hash, i32 first_pos
//   version 2 (a Cache-Craft variant, DESIGN.md §4) continues the header with
//           u32 n_context, str × n_context (the preceding chunk ids, in prompt order),
//           u8 has_stats, then when set: f32 a_bar, b_bar, cci, u32 n, f32 inter × n (one per
//           context chunk), u32 m, u32 ranked × m (token indices)
//   version 3 (a knowledge-tree node, RAGCache §5.1) is version 2 followed by u8 flags, bit 0
//           set: the chunk was computed exactly as `full` computes it — one forward call per
//           segment after an exact chain — so reusing it at its position is bit-identical;
//           bit 1 set: a donor cache (built from an earlier version of the chunk, core/rag/
//           donor-reuse.h), followed by str donor (the earlier chunk's key)
//   version 4 (quantised KV, core/kv/kv-quant.h) is version 3 followed by
//           u8 bits (8 or 4), u32 k_group (tokens per K group), u32 v_group (channels per V
//           group) — whatever the context, stats and flags (empty, 0, 0 for a canonical cache)
//   An f16 canonical cache (no context, no stats) is written as version 1, byte for byte as
//   before; an f16 variant as version 2; an f16 exact chain as version 3; any quantised file as
//   version 4. Readers of every version decode to the same f16 KV (read_layer).
//   then per layer l: block | u64 XXH64 of the block, where the block is
//           f16: K f16 [n_tokens][kv_dim] | V f16 [n_tokens][kv_dim]
//           version 4: K and V quantised in KIVI's groups (K per channel, V per token), with their
//           f16 scales and minimums (core/kv/kv-quant.h gives the block's layout)
// so layer l can be read and verified alone (pipelined loading reads layer l+1 — and decodes it —
// while layer l computes). A file written with a store key (core/kv/store-key.h) ends with a
// signature: "RKVSIG1\0" | HMAC-SHA256 of every byte before it; readers of any version accept it
// and check it only when given the key. Files are written to a unique temporary name and renamed
// into place.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/kv/kv-quant.h"
#include "core/kv/store-key.h"
#include "core/util/error.h"

namespace ragkv {

// Thrown for a cache file that must not be used: truncated, corrupt (checksum), foreign model,
// wrong shape, or holding other tokens. Callers recompute the chunk and count the event.
class CacheFileError : public Error {
 public:
  using Error::Error;
};

// The chunk id of the instruction prefix's cache (the root of every prompt).
inline constexpr const char* kPrefixChunkId = "@prefix";

struct ChunkKvMeta {
  std::string model_fingerprint;  // identifies the model weights (opaque string, <= 256 bytes)
  std::string chunk_id;           // e.g. "Super_Bowl_50#0"
  std::string prefix;             // prefix description, e.g. "canonical:0123456789abcdef"
  // The chunks the cache was computed after, in prompt order (between the prefix and this
  // chunk): empty for the canonical cache. Part of the identity: two variants of one chunk differ
  // here, and a cache is an exact prefix only when its whole chain matches (never by position).
  std::vector<std::string> context;
  // A knowledge-tree node (RAGCache §5.1): computed as `full` computes the prompt — each segment
  // one forward call, after an exact chain — so its KV is bit-identical to full's at first_pos.
  // A Cache-Craft variant (false) may have been computed after approximated KV (write-back) or in
  // other micro-batches. Part of the identity: the store names the two apart.
  bool exact_chain = false;
  // A donor cache (non-empty): the chunk's KV built from the cache of an earlier version of it
  // (its aligned tokens' KV re-positioned, the rest recomputed; core/rag/donor-reuse.h), not
  // computed in the canonical context — never exact, so the exact-prefix paths never use it. The
  // value names the donor: "<chunk id>@<16 hex of its token hash>". Part of the identity by kind
  // only: a reader expecting a donor cache (any non-empty value) accepts whichever donor it names.
  std::string donor;
  uint32_t n_layer = 0, n_kv_head = 0, head_dim = 0;
  uint32_t n_tokens = 0;
  uint64_t token_hash = 0;  // token_ids_hash() of the chunk's token ids
  int32_t first_pos = 0;    // absolute position of the chunk's first token when computed
  uint32_t kv_dim() const { return n_kv_head * head_dim; }
  bool operator==(const ChunkKvMeta&) const = default;
};
uint64_t token_ids_hash(std::span<const int32_t> ids);  // checksum64 over the int32 bytes

// Cache-Craft metadata of a variant (§3.1, §3.2.1), measured while it was computed, each a mean
// over the layers (Eq. 10); checksummed with the header.
struct VariantStats {
  float a_bar = 0;             // Eq. 9: Σ_j inter(C_j, C_i) / (|C_i|·|C_j|) over the context chunks
  float b_bar = 0;             // Eq. 9: intra(C_i) / |C_i|²
  float cci = 0.5f;            // Eq. 11: 1 / (1 + exp(−ā / b̄))
  std::vector<float> inter;    // per context chunk j: inter(C_j, C_i) (Eq. 3), for β (Eq. 6)
  std::vector<uint32_t> ranked;  // the chunk's token indices, most contextualised first (Eq. 14)
  bool operator==(const VariantStats&) const = default;
};

// k[l], v[l]: f16 [n_tokens][kv_dim] for each of the meta.n_layer layers. Atomic; Error on failure
// (no temporary file is left behind).
// stats: a variant's metadata (written in the header), or null.
// encoding: f16 (the default: versions 1–3, as before) or quantised (version 4, core/kv/kv-quant.h).
// key: sign the file (its trailer); null: unsigned.
void write_chunk_kv(const std::filesystem::path& path, const ChunkKvMeta& meta,
                    std::span<const uint16_t* const> k, std::span<const uint16_t* const> v,
                    const VariantStats* stats = nullptr, const KvEncoding& encoding = {},
                    const StoreKey* key = nullptr);

class ChunkKvReader {
 public:
  // Checks, before any layer is read: size, magic, version, header checksum, size implied by the
  // header, and that the header equals `expected` (all fields but first_pos, which is
  // informational). CacheFileError naming the file and what differs; also for a missing file.
  // any_context: accept whatever context the file names (listing a chunk's variants).
  ChunkKvReader(const std::filesystem::path& path, const ChunkKvMeta& expected, bool any_context = false);
  // The same checks without an expected header: whatever chunk the file holds, for listing and
  // verifying a store's files; the caller checks meta() itself (model, shape, and that the name
  // is its address). open_any is the same, named for call sites.
  explicit ChunkKvReader(const std::filesystem::path& path);
  static ChunkKvReader open_any(const std::filesystem::path& path);
  ~ChunkKvReader();
  ChunkKvReader(ChunkKvReader&& o) noexcept;
  ChunkKvReader& operator=(ChunkKvReader&& o) noexcept;
  ChunkKvReader(const ChunkKvReader&) = delete;
  ChunkKvReader& operator=(const ChunkKvReader&) = delete;

  const ChunkKvMeta& meta() const { return meta_; }  // as stored (first_pos included)
  const std::optional<VariantStats>& stats() const { return stats_; }
  const std::filesystem::path& path() const { return path_; }
  const KvEncoding& encoding() const { return encoding_; }  // f16 for versions 1–3
  // Reads layer l's K and V (n_tokens * kv_dim f16 each) with pread, verifies its checksum and,
  // for a quantised file, decodes it to f16 (on the calling thread: the layer loader's);
  // CacheFileError on a short read or mismatch. Thread-safe for concurrent calls.
  void read_layer(int l, uint16_t* k_out, uint16_t* v_out) const;
  // Reads every layer and checks its checksum (store verify, precompute's resume check);
  // CacheFileError naming the first bad layer.
  void verify_all_layers() const;
  size_t layer_bytes() const { return layer_bytes_; }  // bytes of one layer's K+V in f16 (read_layer's output)
  size_t stored_layer_bytes() const { return block_bytes_; }  // bytes of one layer's block in the file
  uint64_t file_bytes() const { return file_bytes_; }
  bool has_signature() const { return signed_; }
  // CacheFileError unless the file carries a signature made with key over all its bytes (read in
  // full, streaming; the layers' own checksums are checked when they are read).
  void check_signature(const StoreKey& key) const;

  // Writes back and drops the file's pages from the OS page cache, so the next read_layer goes to
  // the disk (the cold-disk tier). Best effort: a no-op where the OS ignores the advice.
  void evict_page_cache() const;
  // The share of the file's pages in the OS page cache now (mincore), 0 to 1: how much of a
  // disk-tier read will come from memory (the loading controller's disk read time). 0 where it
  // cannot be told.
  double resident_fraction() const;

 private:
  std::filesystem::path path_;
  ChunkKvMeta meta_;
  std::optional<VariantStats> stats_;
  KvEncoding encoding_;
  int fd_ = -1;
  uint64_t data_offset_ = 0;  // where layer 0 starts
  size_t layer_bytes_ = 0;    // f16 K+V of one layer
  size_t block_bytes_ = 0;    // one layer's block as stored (= layer_bytes_ for f16)
  // Layer l's block read and checked against its checksum: whole into first, or (second set)
  // its halves into first and second (f16's K and V); CacheFileError otherwise.
  void read_block(int l, void* first, void* second = nullptr) const;
  uint64_t file_bytes_ = 0;
  bool signed_ = false;  // the file ends with a signature trailer
  void open(const std::filesystem::path& path, const ChunkKvMeta* expected, bool any_context);
};

}  // namespace ragkv
