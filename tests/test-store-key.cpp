// Signed caches (core/kv/store-key.h): HMAC-SHA256 against RFC 4231's test vector; files written
// with a key verify with it and fail with another; unsigned or altered files are rejected with a
// key — the KV-cache hijacking plant (KV computed in another context, written under a chunk's key
// with valid checksums) included — while without a key such a plant is used (undetectable, as
// docs/store.md says); signed files still read without a key. And the model fingerprint covers
// every weight byte: two GGUFs with the same metadata and one weight changed deep inside a tensor
// (where the old 16 KiB head-and-tail sample never looked) differ.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/backend/cpu-backend.h"
#include "core/format/checksum.h"
#include "core/format/gguf.h"
#include "core/format/hmac.h"
#include "core/kv/kv-store.h"
#include "core/kv/store-check.h"
#include "core/kv/store-key.h"
#include "core/model/model-fingerprint.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using namespace ragkv;
using ragkv::test::TempDir;

KvStoreInfo info() {
  KvStoreInfo i;
  i.model_fingerprint = "model-a";
  i.model_name = "a.gguf";
  i.n_layer = 3;
  i.n_kv_head = 2;
  i.head_dim = 4;
  i.prefix = "canonical:0123456789abcdef";
  return i;
}

ChunkKvMeta meta(const std::string& id) {
  ChunkKvMeta m;
  m.model_fingerprint = "model-a";
  m.chunk_id = id;
  m.prefix = info().prefix;
  m.n_layer = 3;
  m.n_kv_head = 2;
  m.head_dim = 4;
  m.n_tokens = 6;
  const std::vector<int32_t> ids{1, 2, 3, 4, 5, 6};
  m.token_hash = token_ids_hash(ids);
  return m;
}

using Kv = test::RandomKv;

std::vector<uint16_t> layer_k(const ChunkKvReader& r, int l) {
  std::vector<uint16_t> k(r.layer_bytes() / 4), v(r.layer_bytes() / 4);
  r.read_layer(l, k.data(), v.data());
  return k;
}

StoreKey key(char fill) { return StoreKey(std::vector<uint8_t>(32, uint8_t(fill))); }

}  // namespace

TEST_CASE("store key: HMAC-SHA256 matches RFC 4231 test case 2") {
  const std::string k = "Jefe", data = "what do ya want for nothing?";
  HmacSha256 h(std::span(reinterpret_cast<const uint8_t*>(k.data()), k.size()));
  h.update(data.substr(0, 5));
  h.update(data.substr(5));  // in pieces, as files are signed
  const Sha256Digest d = h.final();
  std::string hex;
  for (uint8_t b : d) hex += fmt::format("{:02x}", b);
  CHECK(hex == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("store key: keys shorter than 16 bytes are refused, a key file names itself in errors") {
  CHECK_THROWS_WITH_AS(StoreKey(std::vector<uint8_t>(15, 1)), doctest::Contains("at least 16"), Error);
  const TempDir tmp("store-key-file");
  CHECK_THROWS_WITH_AS(StoreKey::load(tmp.path / "missing"), doctest::Contains("missing"), Error);
  CHECK(StoreKey::load_if_given("") == nullptr);
  CHECK(key('a').id() != key('b').id());
  CHECK(key('a').id().size() == 8);
}

TEST_CASE("store key: signed files verify with their key, and are rejected unsigned, with another key or altered") {
  const TempDir tmp("store-key");
  const ChunkKvMeta m = meta("doc#0");
  const Kv honest(m, 1);
  KvStore signed_store = KvStore::open_for_write(tmp.path / "s", info());
  signed_store.set_key(std::make_shared<const StoreKey>(key('a')));
  signed_store.put(m, honest.kp, honest.vp);
  const fs::path p = signed_store.chunk_path(m);

  SUBCASE("the signer reads it; a store without a key reads it too (the trailer is accepted)") {
    REQUIRE(signed_store.open_chunk(m));
    CHECK(signed_store.open_chunk(m)->has_signature());
    CHECK(signed_store.has_valid(m));
    const KvStore plain = KvStore::open_for_read(tmp.path / "s", "model-a");
    REQUIRE(plain.open_chunk(m));
    CHECK(layer_k(*plain.open_chunk(m), 2) == honest.k[2]);
    CHECK(plain.has_valid(m));
  }
  SUBCASE("another key: rejected, named") {
    KvStore other = KvStore::open_for_read(tmp.path / "s", "model-a");
    other.set_key(std::make_shared<const StoreKey>(key('b')));
    CHECK_THROWS_WITH_AS(other.open_chunk(m), doctest::Contains("does not match store key"), CacheFileError);
    CHECK_FALSE(other.has_valid(m));
  }
  SUBCASE("hijacking: KV from another context planted under the chunk's key with valid checksums") {
    const Kv planted(m, 2);  // what the chunk's KV would be after other text
    write_chunk_kv(p, m, planted.kp, planted.vp);  // a writer without the key: unsigned
    const KvStore plain = KvStore::open_for_read(tmp.path / "s", "model-a");
    REQUIRE(plain.open_chunk(m));  // without a key the plant is undetectable: it is used
    CHECK(layer_k(*plain.open_chunk(m), 0) == planted.k[0]);
    CHECK(plain.has_valid(m));
    CHECK_THROWS_WITH_AS(signed_store.open_chunk(m), doctest::Contains("not signed"), CacheFileError);
    CHECK_FALSE(signed_store.has_valid(m));  // precompute computes and signs it again
    // Signed with another key (a writer with a key of its own): rejected too.
    const StoreKey theirs = key('b');
    write_chunk_kv(p, m, planted.kp, planted.vp, nullptr, {}, &theirs);
    CHECK_THROWS_AS(signed_store.open_chunk(m), CacheFileError);
    // store verify with the key names the file; repair removes it; precompute's put signs again.
    const StoreReport rep = inspect_store(signed_store, /*every_layer=*/true);
    REQUIRE(rep.files.size() == 1);
    CHECK(rep.files[0].problem.find("does not match store key") != std::string::npos);
    CHECK(remove_bad_files(signed_store, rep) == 1);
    signed_store.put(m, honest.kp, honest.vp);
    CHECK(layer_k(*signed_store.open_chunk(m), 1) == honest.k[1]);
  }
  SUBCASE("a signed file altered after signing, its layer checksum recomputed: rejected") {
    // Rewrite the file's KV with the plant's and keep the honest trailer: the checksums are
    // valid (write_chunk_kv made them), only the signature can tell.
    const std::string trailer = [&] {
      std::ifstream in(p, std::ios::binary);
      std::string all((std::istreambuf_iterator<char>(in)), {});
      return all.substr(all.size() - 40);
    }();
    const Kv planted(m, 3);
    write_chunk_kv(p, m, planted.kp, planted.vp);
    std::ofstream(p, std::ios::binary | std::ios::app) << trailer;
    const KvStore plain = KvStore::open_for_read(tmp.path / "s", "model-a");
    REQUIRE(plain.open_chunk(m));  // well-formed: header, checksums and trailer
    CHECK_THROWS_WITH_AS(signed_store.open_chunk(m), doctest::Contains("changed after signing"), CacheFileError);
  }
  SUBCASE("variants: unsigned ones are counted bad and skipped") {
    ChunkKvMeta var = m;
    var.context = {"doc#1"};
    const Kv vk(var, 4);
    write_chunk_kv(signed_store.chunk_path(var), var, vk.kp, vk.vp);  // unsigned
    KvStore fresh = KvStore::open_for_read(tmp.path / "s", "model-a");
    fresh.set_key(std::make_shared<const StoreKey>(key('a')));
    int bad = 0;
    CHECK(fresh.variants(m, &bad).empty());
    CHECK(bad == 1);
  }
}

TEST_CASE("store key: the model fingerprint covers every weight byte") {
  const TempDir tmp("fingerprint");
  const fs::path a = tmp.path / "a.gguf", b = tmp.path / "b.gguf";
  const test::Run r = test::run_ragkv("make-test-model --arch llama --layers 1 --embd 256 --heads 2 --kv-heads 1 --ff 512 "
                                      "--context 64 --out " + test::shell_quote(a));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  fs::copy_file(a, b);
  size_t at = 0;
  {
    const GgufFile g(a.string());
    const GgufTensor* big = nullptr;
    for (const GgufTensor& t : g.tensors())
      if (!big || t.nbytes > big->nbytes) big = &t;
    REQUIRE(big->nbytes > 3 * 16 * 1024);  // a byte the 16 KiB head and tail samples never read
    at = g.header_bytes().size() + big->offset + big->nbytes / 2;
  }
  {
    std::fstream f(b, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(at));
    const char c = char(f.get());
    f.seekp(std::streamoff(at));
    f.put(char(c ^ 0x01));
  }
  const GgufFile ga(a.string()), gb(b.string());
  CHECK(ga.header_bytes() == gb.header_bytes());  // the same metadata
  CHECK(model_fingerprint(ga) != model_fingerprint(gb));
  CHECK(model_fingerprint(ga) == model_fingerprint(GgufFile(a.string())));
}

TEST_CASE("store key: the model fingerprint reads the file, with the values of hashing the mapped bytes") {
  const TempDir tmp("fingerprint-read");
  const fs::path a = tmp.path / "a.gguf";
  const test::Run r = test::run_ragkv("make-test-model --arch llama --layers 1 --embd 256 --heads 2 --kv-heads 1 --ff 512 "
                                      "--context 64 --weight-type q4_k --vocab 32000 --out " + test::shell_quote(a));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const GgufFile g(a.string());
  Checksum64 h;
  h.update(g.header_bytes());
  size_t big = 0;
  for (const GgufTensor& t : g.tensors()) {
    h.update(t.data, t.nbytes);
    big = std::max(big, t.nbytes);
  }
  REQUIRE(big > (size_t(4) << 20));  // the embedding table: read in several pieces
  const std::string mapped = "llama-" + checksum_hex(h.digest());
  CHECK(model_fingerprint(g) == mapped);
  // A model whose backend keeps its weights in the kernels' layout (their mapped pages released
  // where the CPU has AVX-512 VNNI) has the same fingerprint.
  auto backend = make_cpu_backend(1);
  const Model m(a.string(), *backend);
  CHECK(model_fingerprint(m.gguf()) == mapped);
}
