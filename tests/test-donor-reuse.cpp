// Edited-chunk KV reuse (core/rag/donor-reuse.h): the token alignment against hand-worked
// cases; the donor cache's header and name; and, on the default model and testdata/rag-mini, a
// chunk edited in its middle built from its earlier version's cache — the rows before the edit
// equal to a fresh computation's, the error after it shrinking as the repair grows (a full repair
// equals the fresh KV within f16 rounding), stored as a donor cache that `prefix` never uses and
// `reuse` reports in its provenance, and a damaged donor never used.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/format/fp16.h"
#include "core/kv/kv-store.h"
#include "core/kv/kv-tiers.h"
#include "core/rag/answer.h"
#include "core/rag/cache-keys.h"
#include "core/rag/donor-reuse.h"
#include "core/rag/plan.h"
#include "core/rag/precompute.h"
#include "core/rag/variant-choice.h"
#include "tests/test-rag-mini.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using namespace ragkv;

TEST_CASE("align_tokens: longest common subsequence as maximal spans") {
  using V = std::vector<int32_t>;
  CHECK(align_tokens(V{1, 2, 3, 4}, V{1, 2, 3, 4}) == std::vector<AlignedSpan>{{0, 0, 4}});
  // an insertion after two tokens: the rest shifts by the inserted length
  CHECK(align_tokens(V{1, 2, 9, 9, 3, 4}, V{1, 2, 3, 4}) == std::vector<AlignedSpan>{{0, 0, 2}, {4, 2, 2}});
  // a deletion and a substitution
  CHECK(align_tokens(V{1, 3, 7, 5}, V{1, 2, 3, 4, 5}) == std::vector<AlignedSpan>{{0, 0, 1}, {1, 2, 1}, {3, 4, 1}});
  // text moved to the front: one of the two orders survives
  CHECK(align_tokens(V{5, 6, 1, 2, 3}, V{1, 2, 3, 5, 6}) == std::vector<AlignedSpan>{{2, 0, 3}});
  CHECK(align_tokens(V{}, V{1}).empty());
  CHECK(align_tokens(V{1, 2}, V{3, 4}).empty());
  CHECK(align_tokens(V{1, 2, 3}, V{1, 2, 3}, /*max_cells=*/8).empty());  // 4 × 4 cells over the limit
}

TEST_CASE("donor cache: its own header flag and name, never taken for the canonical cache or as exact") {
  test::TempDir dir("donor-header");
  KvStoreInfo info;
  info.model_fingerprint = "m";
  info.n_layer = 1;
  info.n_kv_head = 1;
  info.head_dim = 2;
  info.prefix = "p";
  ChunkKvMeta canonical;
  canonical.model_fingerprint = "m";
  canonical.chunk_id = "doc#abc";
  canonical.prefix = "p";
  canonical.n_layer = 1;
  canonical.n_kv_head = 1;
  canonical.head_dim = 2;
  canonical.n_tokens = 2;
  canonical.token_hash = 42;
  canonical.first_pos = 3;
  ChunkKvMeta donor = canonical;
  donor.donor = "doc#old@00000000000000ff";
  const std::vector<uint16_t> k(4, fp32_to_fp16(0.5f)), v(4, fp32_to_fp16(-1.0f));
  const uint16_t* kp[] = {k.data()};
  const uint16_t* vp[] = {v.data()};
  for (const char* dtype : {"f16", "q8"}) {
    CAPTURE(dtype);
    info.dtype = dtype;
    const KvStore store = KvStore::open_for_write(dir.path / dtype, info);
    store.put(donor, kp, vp);
    CHECK(store.chunk_path(donor).filename().string() == store.chunk_path(canonical).stem().string() + ".donor.rkv");
    CHECK_FALSE(fs::exists(store.chunk_path(canonical)));
    CHECK_FALSE(store.open_chunk(canonical).has_value());  // the canonical name holds nothing
    ChunkKvMeta any = canonical;
    any.donor = "*";  // a lookup: whichever donor
    const std::optional<ChunkKvReader> r = store.open_chunk(any);
    REQUIRE(r.has_value());
    CHECK(r->meta().donor == donor.donor);  // the donor named in the header
    CHECK(store.has_valid(any));
    // Renamed to the canonical cache's name, it is refused there.
    fs::copy_file(store.chunk_path(donor), store.chunk_path(canonical));
    CHECK_THROWS_AS(ChunkKvReader(store.chunk_path(canonical), canonical), CacheFileError);
    CHECK_FALSE(store.has_valid(canonical));
    // At its canonical position and context it is still not an exact prefix.
    SegmentPlan sp;
    sp.begin = 3;
    sp.n_tokens = 2;
    sp.kv = std::make_shared<DiskSegmentKv>(std::move(*store.open_chunk(any)));
    CHECK_FALSE(sp.exact());
    // Nor an exact Cache-Craft candidate for the first chunk.
    const VariantChoice c = choose_variant({{sp.kv->meta(), std::nullopt}}, {}, 2, CraftParams{});
    CHECK_FALSE(c.exact);
  }
}

// rag-mini's chunks as the previous version; the edited ones get a sentence inserted mid-text.
struct DonorFixture : test::RagMini {
  test::TempDir dir{"donor-reuse"};
  std::vector<Chunk> edited;
  DonorFixture() {
    for (int i : {0, 3}) {
      Chunk c = chunks[size_t(i)];
      const size_t mid = c.text.find(". ", c.text.size() / 3);
      REQUIRE(mid != std::string::npos);
      c.text.insert(mid + 2, "This sentence was added in the new release of the page. ");
      c.id = c.doc + "#edited";
      edited.push_back(c);
    }
  }
  // A store holding the previous version's caches (and, with fresh, the edited chunks' computed whole).
  // (The previous version is computed once, into dir/previous; each store starts as a copy of it.)
  fs::path base_store(const std::string& name, bool fresh = false) {
    const fs::path previous = dir.path / "previous", p = dir.path / name;
    if (!fs::exists(previous / "store.json")) {
      const KvStore s = KvStore::open_for_write(previous, CacheKeys(*model, *format).store_info());
      precompute_chunks(*model, *format, s, all());
    }
    fs::copy(previous, p, fs::copy_options::recursive);
    if (fresh) {
      const KvStore s = KvStore::open_for_write(p, CacheKeys(*model, *format).store_info());
      precompute_chunks(*model, *format, s, edited_ptrs());
    }
    return p;
  }
  std::vector<const Chunk*> edited_ptrs() const { return {&edited[0], &edited[1]}; }
};

DonorFixture& donor_fixture() {
  static DonorFixture f;
  return f;
}

// Per layer K then V of a chunk cache, as floats.
std::vector<std::vector<float>> layers_of(const ChunkKvReader& r) {
  std::vector<std::vector<float>> out;
  const size_t half = r.layer_bytes() / 4;
  std::vector<uint16_t> k(half), v(half);
  for (uint32_t l = 0; l < r.meta().n_layer; ++l) {
    r.read_layer(int(l), k.data(), v.data());
    std::vector<float> f;
    for (uint16_t x : k) f.push_back(fp16_to_fp32(x));
    for (uint16_t x : v) f.push_back(fp16_to_fp32(x));
    out.push_back(std::move(f));
  }
  return out;
}

// Mean squared difference over rows [first, last) of every layer's K and V.
double mse_rows(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, size_t d,
                size_t n_tokens, size_t first, size_t last) {
  double s = 0;
  size_t n = 0;
  for (size_t l = 0; l < a.size(); ++l)
    for (size_t half : {size_t(0), n_tokens * d})
      for (size_t i = first * d; i < last * d; ++i, ++n) s += std::pow(double(a[l][half + i]) - b[l][half + i], 2);
  return n ? s / double(n) : 0.0;
}

TEST_CASE("donor reuse on the default model: exact before the edit, repaired after it, a donor cache in the store" *
          doctest::test_suite("real-model")) {
  DonorFixture& f = donor_fixture();
  const CacheKeys keys(*f.model, *f.format);
  const KvStore fresh = KvStore::open_for_read(f.base_store("fresh", true), keys.model_fingerprint());

  std::map<double, double> error_after;  // repair ratio → MSE of the rows after the edit
  for (const double repair : {0.0, 0.3, 1.0}) {
    CAPTURE(repair);
    const fs::path p = f.base_store(fmt::format("donor-{}", repair));
    const KvStore store = KvStore::open_for_read(p, keys.model_fingerprint());
    const DonorFinder donors(*f.format, keys, store, f.chunks, DonorParams{repair});
    const PrecomputeStats st = precompute_chunks(*f.model, *f.format, store, f.edited_ptrs(), {}, nullptr, &donors);
    CHECK(st.computed == 2);
    CHECK(st.from_donor == 2);
    const int64_t whole = st.tokens * f.model->config().n_layer;
    if (repair < 1.0) CHECK(st.token_layers < whole / 2);
    // Precomputing again finds them stored.
    CHECK(precompute_chunks(*f.model, *f.format, store, f.edited_ptrs(), {}, nullptr, &donors).skipped == 2);

    double after = 0;
    for (const Chunk& c : f.edited) {
      const std::vector<int32_t> ids = f.format->chunk_ids(c);
      const ChunkKvMeta m = keys.chunk(c.id, ids);
      CHECK_FALSE(fs::exists(store.chunk_path(m)));
      const std::optional<ChunkKvReader> built = store.open_chunk(keys.donor(m));
      REQUIRE(built.has_value());
      CHECK(built->meta().donor.starts_with(c.doc + "#0@"));
      const std::optional<DonorMatch> match = donors.find(c, ids);
      REQUIRE(match.has_value());
      const size_t first_edit = size_t(match->spans.at(0).n);  // the donor's text runs unchanged up to here
      REQUIRE(first_edit > 8);
      const auto a = layers_of(*built), b = layers_of(*fresh.open_chunk(m));
      const size_t d = m.kv_dim();
      // Before the edit: the donor's rows, computed after the same tokens.
      CHECK(mse_rows(a, b, d, ids.size(), 0, first_edit) < 1e-6);
      after += mse_rows(a, b, d, ids.size(), first_edit, ids.size());
    }
    error_after[repair] = after;
  }
  CHECK(error_after[0.3] < error_after[0.0]);
  CHECK(error_after[1.0] < 0.05 * error_after[0.0]);  // every row after the edit recomputed: f16 rounding apart
}

TEST_CASE("donor reuse: prefix never uses a donor cache, reuse names it" * doctest::test_suite("real-model")) {
  DonorFixture& f = donor_fixture();
  const CacheKeys keys(*f.model, *f.format);
  const fs::path p = f.base_store("answers");
  {
    const KvStore store = KvStore::open_for_read(p, keys.model_fingerprint());
    const DonorFinder donors(*f.format, keys, store, f.chunks);
    REQUIRE(precompute_chunks(*f.model, *f.format, store, f.edited_ptrs(), {}, nullptr, &donors).from_donor == 2);
  }
  const KvStore store = KvStore::open_for_read(p, keys.model_fingerprint());
  KvTiers tiers(store);
  RagAnswerer ans(*f.model, *f.format, &tiers);
  const std::vector<const Chunk*> ctx = {&f.edited[0], &f.chunks[1]};
  AnswerOptions o;
  o.gen.max_tokens = 2;
  o.mode = ReuseMode::prefix;
  const AnswerRecord pre = ans.answer(f.questions[0], ctx, o);
  CHECK(pre.provenance.at(0).source == ChunkProvenance::Source::computed);
  CHECK_FALSE(pre.composed);
  o.mode = ReuseMode::reuse;
  const AnswerRecord re = ans.answer(f.questions[0], ctx, o);
  CHECK(re.provenance.at(0).source == ChunkProvenance::Source::donor);
  CHECK(re.provenance.at(0).donor.starts_with(f.edited[0].doc + "#0@"));
  CHECK(re.provenance.at(0).to_json()["source"] == "donor");
  CHECK(re.composed);
}

TEST_CASE("donor reuse: a donor whose cache fails its checks is not used, the chunk computed whole" *
          doctest::test_suite("check")) {
  DonorFixture& f = donor_fixture();
  const CacheKeys keys(*f.model, *f.format);
  const fs::path q = f.base_store("damaged");
  const KvStore damaged = KvStore::open_for_read(q, keys.model_fingerprint());
  const Chunk& old = f.chunks[0];
  const fs::path donor_file = damaged.chunk_path(keys.chunk(old.id, f.format->chunk_ids(old)));
  {
    std::fstream io(donor_file, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(-100, std::ios::end);
    const char b = char(io.get());
    io.seekp(-100, std::ios::end);
    io.put(char(b ^ 0x5a));
  }
  const DonorFinder donors(*f.format, keys, damaged, f.chunks);
  const PrecomputeStats st = precompute_chunks(*f.model, *f.format, damaged, {&f.edited[0]}, {}, nullptr, &donors);
  CHECK(st.computed == 1);
  CHECK(st.from_donor == 0);
  const std::vector<int32_t> ids = f.format->chunk_ids(f.edited[0]);
  CHECK(damaged.has_valid(keys.chunk(f.edited[0].id, ids)));
}

}  // namespace
