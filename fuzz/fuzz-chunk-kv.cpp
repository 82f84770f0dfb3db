// Fuzz target: chunk-KV cache files (core/kv/chunk-kv-file.*, the .rkv files of a store) and the store
// around them (core/kv/kv-store.*, core/kv/store-check.*, core/kv/verified-record.*, core/kv/variant-ledger.*).
// Byte 0 of the input holds flags, the rest is:
//   flag 2 clear: one .rkv file, opened as answer and store verify open it, every layer read;
//   flag 2 set:   a store — store.json, verified.log, craft.json, variant-usage.json and one .rkv
//                 (cut by fuzz-common.h's separator) — checked as `ragkv store verify` does, and
//                 read as precompute and answer read it.
// With flag 1 the harness first rewrites the header and layer checksums to match the bytes, so
// the fuzzer gets past them to the header decoding and the size arithmetic (without it, the
// checksum paths are fuzzed).
#include <cstdint>
#include <cstring>
#include <string>

#include "core/format/checksum.h"
#include "fuzz/fuzz-common.h"
#include "core/kv/chunk-kv-file.h"
#include "core/kv/kv-store.h"
#include "core/kv/store-check.h"
#include "core/kv/variant-ledger.h"

using namespace ragkv;

namespace {

// Rewrites the checksums of a chunk file in place where its layout can be followed (the format
// is in core/kv/chunk-kv-file.h); stops silently where it cannot.
void fix_checksums(std::string& f) {
  constexpr size_t kPre = 16;
  if (f.size() < kPre + 8) return;
  uint32_t header_len;
  std::memcpy(&header_len, f.data() + 12, 4);
  if (header_len > f.size() - kPre - 8) return;
  const uint64_t sum = checksum64(f.data(), kPre + header_len);
  std::memcpy(f.data() + kPre + header_len, &sum, 8);
  // The shape: three length-prefixed strings, then n_layer, n_kv_head, head_dim, n_tokens.
  size_t p = kPre;
  const size_t end = kPre + header_len;
  for (int s = 0; s < 3; ++s) {
    uint32_t n;
    if (p + 4 > end) return;
    std::memcpy(&n, f.data() + p, 4);
    if (n > end - p - 4) return;
    p += 4 + n;
  }
  uint32_t shape[4];
  if (p + 16 > end) return;
  std::memcpy(shape, f.data() + p, 16);
  const uint64_t layer = uint64_t(shape[1]) * shape[2] * shape[3] * 4;  // K and V, f16
  if (shape[1] > 4096 || shape[2] > 4096 || shape[3] > (1u << 20)) return;
  size_t off = end + 8;
  for (uint32_t l = 0; l < shape[0] && layer <= f.size() && off + layer + 8 <= f.size(); ++l) {
    const uint64_t s = checksum64(f.data() + off, size_t(layer));
    std::memcpy(f.data() + off + layer, &s, 8);
    off += size_t(layer) + 8;
  }
}

void read_chunk_file(const std::filesystem::path& path) {
  const ChunkKvReader r = ChunkKvReader::open_any(path);
  const ChunkKvMeta& m = r.meta();
  RAGKV_FUZZ_CHECK(r.layer_bytes() == size_t(m.n_tokens) * m.kv_dim() * 4, "layer bytes {} for {} x {}",
                   r.layer_bytes(), m.n_tokens, m.kv_dim());
  if (r.stats()) {
    RAGKV_FUZZ_CHECK(r.stats()->inter.size() == m.context.size(), "stats for {} of {} context chunks",
                     r.stats()->inter.size(), m.context.size());
    for (uint32_t t : r.stats()->ranked) RAGKV_FUZZ_CHECK(t < m.n_tokens, "ranked token {} of {}", t, m.n_tokens);
  }
  // The header it holds is what it is expected to hold: it opens; any other is refused.
  ChunkKvReader same(path, m);
  ChunkKvMeta other = m;
  other.chunk_id += "x";
  bool refused = false;
  try {
    ChunkKvReader(path, other);
  } catch (const CacheFileError&) {
    refused = true;
  }
  RAGKV_FUZZ_CHECK(refused, "a file holding '{}' opened as '{}'", m.chunk_id, other.chunk_id);
  r.verify_all_layers();
}

void read_store(const std::filesystem::path& dir, const std::filesystem::path& rkv) {
  const KvStore store = open_store_for_inspection(dir);
  const StoreReport report = inspect_store(store, true);
  RAGKV_FUZZ_CHECK(report.files.size() <= 1, "{} files reported for one", report.files.size());
  for (const auto& f : report.files)
    if (!f.problem.empty()) RAGKV_FUZZ_CHECK(report.bad() > 0, "a bad file not counted: {}", f.problem);
  store.usage();
  read_craft_settings(store);
  VariantLedger(store).files();
  // The file as precompute and answer look it up (by its own header's address).
  std::optional<ChunkKvMeta> meta;
  try {
    meta = ChunkKvReader::open_any(rkv).meta();
  } catch (const CacheFileError&) {
  }
  if (!meta) return;
  std::error_code ec;
  std::filesystem::rename(rkv, store.chunk_path(*meta), ec);
  store.has_valid(*meta);
  try {
    store.open_chunk(*meta);
  } catch (const CacheFileError&) {
  }
  ChunkKvMeta canonical = *meta;
  canonical.context.clear();
  canonical.exact_chain = false;
  int bad = 0;
  store.variants(canonical, &bad);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  if (!(flags & 2)) {
    std::string file(input);
    if (flags & 1) fix_checksums(file);
    const auto path = fuzz::write_scratch("one/chunk.rkv", file);
    fuzz::expect_ok_or_error(path.string(), [&] { read_chunk_file(path); });
    return 0;
  }
  const auto parts = fuzz::split_parts(input, 5);
  const auto dir = fuzz::scratch_dir() / "store";
  std::filesystem::remove_all(dir);
  const char* names[4] = {"store.json", "verified.log", "craft.json", "variant-usage.json"};
  for (int i = 0; i < 4; ++i)
    if (!parts[i].empty()) fuzz::write_scratch(std::string("store/") + names[i], parts[i]);
  std::string file(parts[4]);
  if (flags & 1) fix_checksums(file);
  const auto rkv = fuzz::write_scratch("store/kv/0123456789abcdef.rkv", file);
  fuzz::expect_ok_or_error(dir.string(), [&] { read_store(dir, rkv); });
  return 0;
}
