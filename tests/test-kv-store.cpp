// STORE_DIR chunk caches: bit-exact round trips (also from two threads), files refused at open
// (truncated, corrupt header, another model / shape / token ids / chunk / prefix, missing), a
// corrupt layer refused only when read, the KV tiers (disk, host, device feeds), and the store:
// store.json model checks, foreign stores, content-addressed paths, resume checks, no
// temporaries left, usage.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "core/backend/cpu-backend.h"
#include "core/format/checked-file.h"
#include "core/kv/kv-store.h"
#include "core/kv/kv-tiers.h"
#include "core/kv/segment-kv.h"
#include "tests/test-recording-backend.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using ragkv::CacheFileError;
using ragkv::ChunkKvMeta;
using ragkv::ChunkKvReader;
using ragkv::KvStore;
using ragkv::KvStoreInfo;
using ragkv::test::TempDir;
using ragkv::test::error_of;

ChunkKvMeta small_meta(uint32_t n_layer = 3, uint32_t n_tokens = 5) {
  ChunkKvMeta m;
  m.model_fingerprint = "model-a";
  m.chunk_id = "Super_Bowl_50#0";
  m.prefix = "canonical:0123456789abcdef";
  m.n_layer = n_layer;
  m.n_kv_head = 2;
  m.head_dim = 4;
  m.n_tokens = n_tokens;
  std::vector<int32_t> ids(n_tokens);
  for (uint32_t i = 0; i < n_tokens; ++i) ids[i] = int32_t(100 + 7 * i);
  m.token_hash = ragkv::token_ids_hash(ids);
  m.first_pos = 12;
  return m;
}

using ChunkData = ragkv::test::RandomKv;

void write(const fs::path& p, const ChunkKvMeta& m, const ChunkData& d) { ragkv::write_chunk_kv(p, m, d.kp, d.vp); }

// Reads layer l and checks it equals the data written, bit for bit.
void check_layer(const ChunkKvReader& r, int l, const ChunkData& d) {
  const size_t n = d.k[size_t(l)].size();
  std::vector<uint16_t> k(n), v(n);
  r.read_layer(l, k.data(), v.data());
  CHECK(k == d.k[size_t(l)]);
  CHECK(v == d.v[size_t(l)]);
}

std::string open_error(const fs::path& p, const ChunkKvMeta& expected) {
  try {
    ChunkKvReader r(p, expected);
  } catch (const CacheFileError& e) {
    return e.what();
  }
  return "";
}

void overwrite(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// Offset of layer l's K in a chunk file's bytes.
size_t layer_offset(const std::string& bytes, size_t layer_bytes, int l) {
  uint32_t header_len;
  std::memcpy(&header_len, bytes.data() + 12, 4);
  return 16 + header_len + 8 + size_t(l) * (layer_bytes + 8);
}

KvStoreInfo store_info(const std::string& fp = "model-a") {
  KvStoreInfo i;
  i.model_fingerprint = fp;
  i.model_name = fp + ".gguf";
  i.n_layer = 3;
  i.n_kv_head = 2;
  i.head_dim = 4;
  i.prefix = "canonical:0123456789abcdef";
  return i;
}

std::vector<std::string> kv_files(const KvStore& s) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(s.dir() / "kv")) names.push_back(e.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("chunk KV file: round trip is bit-exact for every layer") {
  TempDir tmp("kv-roundtrip");
  const ChunkKvMeta m = small_meta();
  const ChunkData d(m, 1);
  const fs::path p = tmp.path / "c.rkv";
  write(p, m, d);
  ChunkKvReader r(p, m);
  CHECK(r.meta() == m);
  CHECK(r.path() == p);
  CHECK(r.layer_bytes() == 2 * 5 * 8 * 2);
  CHECK(fs::file_size(p) == r.file_bytes());
  for (int l = 0; l < 3; ++l) check_layer(r, l, d);
  std::vector<uint16_t> k(40), v(40);
  CHECK_THROWS_AS(r.read_layer(3, k.data(), v.data()), ragkv::Error);
  CHECK_THROWS_AS(r.read_layer(-1, k.data(), v.data()), ragkv::Error);

  // first_pos is informational: a chunk computed at another position still opens.
  ChunkKvMeta other_pos = m;
  other_pos.first_pos = 999;
  ChunkKvReader r2(p, other_pos);
  CHECK(r2.meta().first_pos == 12);

  // Moving keeps the file open.
  ChunkKvReader moved(std::move(r2));
  check_layer(moved, 2, d);
  // No temporaries beside the file.
  CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()) == 1);
}

// Layer l of a feed equals the data written, bit for bit.
static void check_feed_layer(const ragkv::SegmentKv& kv, ragkv::Backend& b, int l, const ChunkData& d) {
  const size_t n = d.k[size_t(l)].size();
  std::vector<uint16_t> k(n), v(n), staging;
  if (kv.tier() == ragkv::KvTier::device) {
    b.download(*kv.device_k(l), k.data());
    b.download(*kv.device_v(l), v.data());
  } else {
    const ragkv::HostKvLayer h = kv.host_layer(l, staging);
    k.assign(h.k, h.k + n);
    v.assign(h.v, h.v + n);
  }
  CHECK(k == d.k[size_t(l)]);
  CHECK(v == d.v[size_t(l)]);
}

TEST_CASE("KV tiers: disk, host and device feeds give the same layers, and copies are verified when placed") {
  TempDir tmp("kv-tiers");
  const ChunkKvMeta m = small_meta(3, 9);
  const ChunkData d(m, 5);
  const KvStore s = KvStore::open_for_write(tmp.path / "store", store_info());
  s.put(m, d.kp, d.vp);
  auto backend = ragkv::make_cpu_backend(1);
  ragkv::KvTiers tiers(s);

  // Only the store holds it: the disk feed.
  auto disk = tiers.find(m);
  REQUIRE(disk);
  CHECK(disk->tier() == ragkv::KvTier::disk);
  CHECK(disk->bytes() == 3 * disk->layer_bytes());
  static_cast<const ragkv::DiskSegmentKv&>(*disk).reader().evict_page_cache();  // the cold-disk start
  for (int l = 0; l < 3; ++l) check_feed_layer(*disk, *backend, l, d);
  CHECK_THROWS_AS(disk->device_k(0), ragkv::Error);

  // Placed in host memory: found there first; the file may change afterwards, the copy is what is read.
  tiers.place(m, ragkv::KvTier::host);
  CHECK(tiers.bytes(ragkv::KvTier::host) == disk->bytes());
  auto host = tiers.find(m);
  REQUIRE(host);
  CHECK(host->tier() == ragkv::KvTier::host);
  const std::string bytes = ragkv::read_file(s.chunk_path(m));
  std::string b = bytes;
  b[layer_offset(bytes, disk->layer_bytes(), 2) + 2] ^= 0x10;
  overwrite(s.chunk_path(m), b);
  for (int l = 0; l < 3; ++l) check_feed_layer(*host, *backend, l, d);

  // The device tier outranks the host tier; placing reads (and verifies) the file: the corrupt
  // layer is found now and nothing is kept.
  CHECK_THROWS_WITH_AS(tiers.place(m, ragkv::KvTier::device, backend.get()), doctest::Contains("layer 2 checksum mismatch"),
                       CacheFileError);
  CHECK(tiers.bytes(ragkv::KvTier::device) == 0);
  overwrite(s.chunk_path(m), bytes);
  tiers.place(m, ragkv::KvTier::device, backend.get());
  auto dev = tiers.find(m);
  REQUIRE(dev);
  CHECK(dev->tier() == ragkv::KvTier::device);
  for (int l = 0; l < 3; ++l) check_feed_layer(*dev, *backend, l, d);
  std::vector<uint16_t> staging;
  CHECK_THROWS_AS(dev->host_layer(0, staging), ragkv::Error);

  // Dropped from memory: back to the file. Unknown chunks: nothing, and nothing to place.
  tiers.drop(m);
  CHECK(tiers.find(m)->tier() == ragkv::KvTier::disk);
  CHECK(tiers.bytes(ragkv::KvTier::host) + tiers.bytes(ragkv::KvTier::device) == 0);
  ChunkKvMeta other = m;
  other.chunk_id = "Other#0";
  CHECK_FALSE(tiers.find(other));
  CHECK_THROWS_AS(tiers.place(other, ragkv::KvTier::host), ragkv::Error);
  CHECK(ragkv::parse_kv_tier("host") == ragkv::KvTier::host);
  CHECK_THROWS_WITH_AS(ragkv::parse_kv_tier("gpu"), doctest::Contains("expected device, host or disk"), ragkv::Error);
}

TEST_CASE("KV tiers: a host copy placed with a backend is pinned on it once, and unpinned when it goes") {
  TempDir tmp("kv-tiers-pin");
  const ChunkKvMeta m = small_meta(3, 9);
  const ChunkData d(m, 5);
  const KvStore s = KvStore::open_for_write(tmp.path / "store", store_info());
  s.put(m, d.kp, d.vp);
  ragkv::test::RecordingBackend backend;
  {
    ragkv::KvTiers tiers(s);
    tiers.place(m, ragkv::KvTier::host, &backend);
    tiers.place(m, ragkv::KvTier::host, &backend);  // already held: nothing more
    REQUIRE(backend.pinned.size() == 1);
    auto host = tiers.find(m);
    REQUIRE(host);
    std::vector<uint16_t> unused;
    // The whole segment, from its first layer's K on.
    CHECK(backend.pinned[0].first == host->host_layer(0, unused).k);
    CHECK(backend.pinned[0].second == host->bytes());
    tiers.drop(m);
    CHECK(backend.unpinned.empty());  // `host` still holds it
  }
  CHECK(backend.unpinned.size() == 1);
  CHECK(backend.unpinned[0] == backend.pinned[0].first);
  // Without a backend nothing is pinned (and nothing unpinned).
  ragkv::KvTiers tiers(s);
  tiers.place(m, ragkv::KvTier::host);
  tiers.drop(m);
  CHECK(backend.pinned.size() == 1);
  CHECK(backend.unpinned.size() == 1);
}

TEST_CASE("chunk KV file: layers read from two threads at once") {
  TempDir tmp("kv-threads");
  const ChunkKvMeta m = small_meta(8, 37);
  const ChunkData d(m, 2);
  const fs::path p = tmp.path / "c.rkv";
  write(p, m, d);
  const ChunkKvReader r(p, m);
  std::atomic<int> mismatches{0};
  auto reader = [&](int first) {
    const size_t n = size_t(m.n_tokens) * m.kv_dim();
    std::vector<uint16_t> k(n), v(n);
    for (int rep = 0; rep < 50; ++rep)
      for (int l = first; l < int(m.n_layer); l += 2) {
        r.read_layer(l, k.data(), v.data());
        if (k != d.k[size_t(l)] || v != d.v[size_t(l)]) ++mismatches;
      }
  };
  std::thread a(reader, 0), b(reader, 1);
  a.join();
  b.join();
  CHECK(mismatches == 0);
}

TEST_CASE("chunk KV file: truncated or corrupt files are refused") {
  TempDir tmp("kv-corrupt");
  const ChunkKvMeta m = small_meta();
  const ChunkData d(m, 3);
  const fs::path good = tmp.path / "good.rkv", p = tmp.path / "bad.rkv";
  write(good, m, d);
  const std::string bytes = ragkv::read_file(good);
  const size_t layer_bytes = ChunkKvReader(good, m).layer_bytes();

  SUBCASE("cut in the header") {
    overwrite(p, bytes.substr(0, 30));
    CHECK(open_error(p, m).find("truncated") != std::string::npos);
    overwrite(p, bytes.substr(0, 10));
    CHECK(open_error(p, m).find("truncated") != std::string::npos);
    overwrite(p, "");
    CHECK(open_error(p, m).find("truncated") != std::string::npos);
  }
  SUBCASE("cut in the last layer") {
    overwrite(p, bytes.substr(0, bytes.size() - 3));
    const std::string err = open_error(p, m);
    CHECK(err.find("truncated") != std::string::npos);
    CHECK(err.find(p.string()) != std::string::npos);
  }
  SUBCASE("bytes appended") {
    overwrite(p, bytes + "x");
    CHECK(open_error(p, m).find("the header implies") != std::string::npos);
  }
  SUBCASE("bad magic") {
    std::string b = bytes;
    b[0] = 'X';
    overwrite(p, b);
    CHECK(open_error(p, m).find("bad magic") != std::string::npos);
  }
  SUBCASE("a flipped byte in the header") {
    std::string b = bytes;
    b[22] ^= 0x01;  // inside the model fingerprint
    overwrite(p, b);
    CHECK(open_error(p, m).find("header checksum mismatch") != std::string::npos);
  }
  SUBCASE("a flipped byte in layer 1's K: open succeeds, only layer 1 fails") {
    std::string b = bytes;
    b[layer_offset(bytes, layer_bytes, 1) + 5] ^= 0x40;
    overwrite(p, b);
    ChunkKvReader r(p, m);
    check_layer(r, 0, d);
    check_layer(r, 2, d);
    std::vector<uint16_t> k(40), v(40);
    try {
      r.read_layer(1, k.data(), v.data());
      FAIL("layer 1 was accepted");
    } catch (const CacheFileError& e) {
      CHECK(std::string(e.what()).find("layer 1 checksum mismatch") != std::string::npos);
    }
  }
  SUBCASE("a flipped byte in a layer checksum") {
    std::string b = bytes;
    b[layer_offset(bytes, layer_bytes, 2) + layer_bytes] ^= 0x01;
    overwrite(p, b);
    ChunkKvReader r(p, m);
    std::vector<uint16_t> k(40), v(40);
    CHECK_THROWS_AS(r.read_layer(2, k.data(), v.data()), CacheFileError);
  }
  SUBCASE("missing file") {
    CHECK(open_error(tmp.path / "none.rkv", m).find("cannot open") != std::string::npos);
  }
  SUBCASE("0 layers of a huge shape, checksum intact (fuzz regression)") {
    // fuzz/fuzz-chunk-kv.cpp: the size check passed (0 layers need no bytes), then
    // verify_all_layers allocated gigabytes for one layer's K and V.
    uint32_t header_len;
    std::memcpy(&header_len, bytes.data() + 12, 4);
    std::string b = bytes.substr(0, 16 + header_len);
    const uint32_t shape[3] = {0, 30000, 30000};  // n_layer, n_kv_head, head_dim: 28 bytes before the end
    std::memcpy(b.data() + b.size() - 28, shape, sizeof shape);
    const uint64_t sum = ragkv::checksum64(b.data(), b.size());
    b.append(reinterpret_cast<const char*>(&sum), 8);
    overwrite(p, b);
    std::string err;
    try {
      ChunkKvReader::open_any(p).verify_all_layers();
    } catch (const CacheFileError& e) {
      err = e.what();
    }
    CHECK(err.find(p.string() + ": corrupt: the header gives the chunk 0 layers") != std::string::npos);
  }
}

TEST_CASE("chunk KV file: another model, shape, token ids, chunk or prefix is refused by name") {
  TempDir tmp("kv-foreign");
  const ChunkKvMeta m = small_meta();
  const ChunkData d(m, 4);
  const fs::path p = tmp.path / "c.rkv";
  write(p, m, d);

  ChunkKvMeta e = m;
  e.model_fingerprint = "model-b";
  CHECK(open_error(p, e).find("written by model model-a, expected model-b") != std::string::npos);

  e = m;
  e.token_hash ^= 1;
  CHECK(open_error(p, e).find("tokens (hash") != std::string::npos);
  e = m;
  e.n_tokens = 6;
  CHECK(open_error(p, e).find("holds 5 tokens") != std::string::npos);

  e = m;
  e.head_dim = 8;
  CHECK(open_error(p, e).find("shape 3x2x4 (n_layer x n_kv_head x head_dim), expected 3x2x8") != std::string::npos);
  e = m;
  e.n_layer = 4;
  CHECK(open_error(p, e).find("expected 4x2x4") != std::string::npos);

  e = m;
  e.chunk_id = "Other#1";
  CHECK(open_error(p, e).find("holds chunk 'Super_Bowl_50#0', expected 'Other#1'") != std::string::npos);
  e = m;
  e.prefix = "variant:abc";
  CHECK(open_error(p, e).find("expected 'variant:abc'") != std::string::npos);

  // Several differences are all named.
  e = m;
  e.model_fingerprint = "model-b";
  e.chunk_id = "Other#1";
  const std::string err = open_error(p, e);
  CHECK(err.find("model-b") != std::string::npos);
  CHECK(err.find("Other#1") != std::string::npos);
}

TEST_CASE("chunk KV file: write refuses a wrong layer count") {
  TempDir tmp("kv-write-args");
  const ChunkKvMeta m = small_meta();
  const ChunkData d(m, 5);
  std::vector<const uint16_t*> two(d.kp.begin(), d.kp.begin() + 2);
  CHECK_THROWS_AS(ragkv::write_chunk_kv(tmp.path / "c.rkv", m, two, d.vp), ragkv::Error);
  CHECK(fs::is_empty(tmp.path));
}

TEST_CASE("token_ids_hash is XXH64 of the int32 bytes") {
  const std::vector<int32_t> a{1, 2, 3}, b{1, 2, 4};
  CHECK(ragkv::token_ids_hash(a) == ragkv::checksum64(a.data(), a.size() * 4));
  CHECK(ragkv::token_ids_hash(a) != ragkv::token_ids_hash(b));
}

TEST_CASE("KvStore: put, has_valid, open_chunk, usage, no temporaries") {
  TempDir tmp("kv-store");
  const fs::path dir = tmp.path / "store";
  const KvStore s = KvStore::open_for_write(dir, store_info());
  CHECK(fs::is_directory(dir / "kv"));
  CHECK(fs::exists(dir / "store.json"));
  CHECK(s.info() == store_info());
  CHECK(!s.foreign());
  CHECK(s.usage() == std::pair<size_t, uint64_t>{0, 0});

  ChunkKvMeta m = small_meta();
  const ChunkData d(m, 6);
  CHECK(!s.has_valid(m));
  CHECK(!s.open_chunk(m).has_value());
  s.put(m, d.kp, d.vp);
  CHECK(s.has_valid(m));
  {
    const auto r = s.open_chunk(m);
    REQUIRE(r.has_value());
    for (int l = 0; l < 3; ++l) check_layer(*r, l, d);
  }
  ChunkKvMeta other_tokens = m;
  other_tokens.token_hash ^= 1;
  CHECK(!s.has_valid(other_tokens));
  CHECK(!s.open_chunk(other_tokens).has_value());

  // More chunks, one of them written twice at once (two writers of the same chunk).
  std::vector<ChunkKvMeta> metas;
  for (int i = 1; i <= 3; ++i) {
    ChunkKvMeta mi = m;
    mi.chunk_id = "doc#" + std::to_string(i);
    metas.push_back(mi);
  }
  const ChunkData d1(metas[0], 7);
  std::thread a([&] { for (int i = 0; i < 20; ++i) s.put(metas[0], d1.kp, d1.vp); });
  std::thread b([&] { for (int i = 0; i < 20; ++i) s.put(metas[0], d1.kp, d1.vp); });
  a.join();
  b.join();
  CHECK(s.has_valid(metas[0]));
  for (size_t i = 1; i < metas.size(); ++i) s.put(metas[i], d.kp, d.vp);

  const auto names = kv_files(s);
  CHECK(names.size() == 4);
  for (const auto& n : names) {
    CHECK_MESSAGE(n.size() == 20, n);
    CHECK_MESSAGE(n.ends_with(".rkv"), n);
  }
  const auto [count, bytes] = s.usage();
  CHECK(count == 4);
  uint64_t want_bytes = fs::file_size(s.chunk_path(m));
  for (const auto& mi : metas) want_bytes += fs::file_size(s.chunk_path(mi));
  CHECK(bytes == want_bytes);

  // A temporary-looking file is not counted.
  tmp.write("store/kv/0123456789abcdef.rkv.tmp.1.2", "partial");
  CHECK(s.usage().first == 4);

  // A damaged file: not valid for resume, and open_chunk says so.
  std::string b2 = ragkv::read_file(s.chunk_path(m));
  overwrite(s.chunk_path(m), b2.substr(0, b2.size() / 2));
  CHECK(!s.has_valid(m));
  CHECK_THROWS_AS(s.open_chunk(m), CacheFileError);

  // put refuses chunks of another model or shape.
  ChunkKvMeta wrong = m;
  wrong.model_fingerprint = "model-b";
  CHECK_THROWS_AS(s.put(wrong, d.kp, d.vp), ragkv::Error);
  wrong = small_meta(2);
  const ChunkData d2(wrong, 8);
  CHECK_THROWS_AS(s.put(wrong, d2.kp, d2.vp), ragkv::Error);
}

TEST_CASE("KvStore: reopening, another model's store, foreign reads") {
  TempDir tmp("kv-store-model");
  const fs::path dir = tmp.path / "store";
  const ChunkKvMeta m = small_meta();
  const ChunkData d(m, 9);
  KvStore::open_for_write(dir, store_info()).put(m, d.kp, d.vp);

  // Reopening for the same model keeps the chunks.
  CHECK(KvStore::open_for_write(dir, store_info()).has_valid(m));

  try {
    KvStore::open_for_write(dir, store_info("model-b"));
    FAIL("a store of another model was opened for writing");
  } catch (const ragkv::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("built for model model-a.gguf (model-a), not for this model (model-b): its 1 cache files are not "
                    "used; pass another --store") != std::string::npos);
  }
  KvStoreInfo reweighted = store_info("model-a2");  // the same file, other weights (or an older fingerprint)
  reweighted.model_name = "model-a.gguf";
  CHECK_THROWS_WITH_AS(KvStore::open_for_write(dir, reweighted), doctest::Contains("a file of the same name with other weights"),
                       ragkv::Error);
  KvStoreInfo other_shape = store_info();
  other_shape.head_dim = 8;
  CHECK_THROWS_AS(KvStore::open_for_write(dir, other_shape), ragkv::Error);

  const KvStore r = KvStore::open_for_read(dir, "model-a");
  CHECK(!r.foreign());
  CHECK(r.info() == store_info());
  CHECK(r.open_chunk(m).has_value());

  const KvStore f = KvStore::open_for_read(dir, "model-b");
  CHECK(f.foreign());
  CHECK(f.info().model_fingerprint == "model-a");
  ChunkKvMeta mb = m;
  mb.model_fingerprint = "model-b";
  CHECK(!f.open_chunk(m).has_value());
  CHECK(!f.open_chunk(mb).has_value());
  CHECK(!f.has_valid(m));
  CHECK_THROWS_AS(f.put(mb, d.kp, d.vp), ragkv::Error);

  CHECK_THROWS_AS(KvStore::open_for_read(tmp.path / "none", "model-a"), ragkv::Error);
  fs::create_directories(tmp.path / "empty");
  CHECK_THROWS_AS(KvStore::open_for_read(tmp.path / "empty", "model-a"), ragkv::Error);
  tmp.write("garbage/store.json", "{not json");
  CHECK_THROWS_AS(KvStore::open_for_read(tmp.path / "garbage", "model-a"), ragkv::Error);
  // The same reading as fuzz/fuzz-index.cpp found in the index manifest: a shape field written as
  // a float beyond the integer's range (an undefined cast in nlohmann's get<uint32_t>()) or as an
  // integer beyond it (wrapped) is malformed, and the message names the file.
  for (const char* n_layer : {"1e47", "4294967298", "2.5"}) {
    CAPTURE(n_layer);
    const fs::path sj = tmp.write("odd/store.json",
                                  fmt::format(R"({{"format": "ragkv-store", "format_version": 1, "model_fingerprint": "a",
                                                "model_name": "a", "n_layer": {}, "n_kv_head": 1, "head_dim": 4,
                                                "dtype": "f16", "prefix": "p"}})",
                                              n_layer));
    const std::string msg = error_of([&] { KvStore::open_for_read(tmp.path / "odd", "a"); });
    CHECK(msg.find(sj.string() + ": malformed store file") != std::string::npos);
  }
}

TEST_CASE("KvStore: chunk_path is a content address over model, prefix, chunk and tokens") {
  TempDir tmp("kv-store-path");
  const KvStore s = KvStore::open_for_write(tmp.path, store_info());
  const ChunkKvMeta m = small_meta();
  const fs::path base = s.chunk_path(m);
  CHECK(base.parent_path() == tmp.path / "kv");
  CHECK(base.extension() == ".rkv");

  std::set<fs::path> paths{base};
  ChunkKvMeta e = m;
  e.model_fingerprint = "model-b";
  paths.insert(s.chunk_path(e));
  e = m;
  e.prefix = "variant:1";
  paths.insert(s.chunk_path(e));
  e = m;
  e.chunk_id = "Other#0";
  paths.insert(s.chunk_path(e));
  e = m;
  e.token_hash ^= 1;
  paths.insert(s.chunk_path(e));
  CHECK(paths.size() == 5);

  // Fields are separated unambiguously.
  ChunkKvMeta x = m, y = m;
  x.prefix = "ab";
  x.chunk_id = "c";
  y.prefix = "a";
  y.chunk_id = "bc";
  CHECK(s.chunk_path(x) != s.chunk_path(y));

  // first_pos is not part of the address.
  e = m;
  e.first_pos = 77;
  CHECK(s.chunk_path(e) == base);
}
