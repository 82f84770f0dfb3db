// A store that verifies and repairs itself: has_valid reads every layer once and then trusts
// STORE/verified.log while a file is unchanged; inspect_store finds each fault class (a flipped bit
// in a layer, truncation, another model's file, a misnamed file) and the temporaries of dead
// writers, and remove_bad_files removes exactly those; the temp-file names and what the sweeps
// prove from them; `ragkv store verify | repair | stats` and precompute repairing a flipped bit,
// byte-identical to the original.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/kv/kv-store.h"
#include "core/kv/store-check.h"
#include "core/kv/store-lock.h"
#include "core/kv/verified-record.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using ragkv::ChunkKvMeta;
using ragkv::KvStore;
using ragkv::test::TempDir;

ragkv::KvStoreInfo info() {
  ragkv::KvStoreInfo i;
  i.model_fingerprint = "model-a";
  i.model_name = "a.gguf";
  i.n_layer = 3;
  i.n_kv_head = 2;
  i.head_dim = 4;
  i.prefix = "canonical:0123456789abcdef";
  return i;
}

ChunkKvMeta meta(const std::string& id, const std::string& model = "model-a") {
  ChunkKvMeta m;
  m.model_fingerprint = model;
  m.chunk_id = id;
  m.prefix = info().prefix;
  m.n_layer = 3;
  m.n_kv_head = 2;
  m.head_dim = 4;
  m.n_tokens = 6;
  const std::vector<int32_t> ids{1, 2, 3, 4, 5, 6};
  m.token_hash = ragkv::token_ids_hash(ids);
  return m;
}

void put(const KvStore& s, const ChunkKvMeta& m, uint32_t seed = 1) {
  const ragkv::test::RandomKv d(m, seed);
  s.put(m, d.kp, d.vp);
}

// Flips one bit in the last layer (past the header) in place, keeping (or not) the mtime.
void flip_bit_in_last_layer(const fs::path& p, bool keep_mtime) {
  struct stat before;
  REQUIRE(::stat(p.c_str(), &before) == 0);
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  const auto size = fs::file_size(p);
  f.seekg(std::streamoff(size - 20));
  char c;
  f.get(c);
  f.seekp(std::streamoff(size - 20));
  f.put(char(c ^ 0x04));
  f.close();
  if (keep_mtime) {
    const timespec times[2] = {before.st_atim, before.st_mtim};
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, 0) == 0);
  }
}

long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return long(child);
}

const ragkv::StoreFileReport* find(const ragkv::StoreReport& r, const fs::path& p) {
  for (const auto& f : r.files)
    if (f.name == p.filename().string()) return &f;
  return nullptr;
}

}  // namespace

TEST_CASE("store check: has_valid reads every layer once, then trusts verified.log while the file is unchanged") {
  TempDir tmp("store-valid");
  const KvStore s = KvStore::open_for_write(tmp.path / "store", info());
  const ChunkKvMeta a = meta("a"), b = meta("b");
  put(s, a);
  put(s, b, 2);
  CHECK(fs::exists(tmp.path / "store" / "verified.log"));  // put records what it wrote
  CHECK(s.has_valid(a));

  // A flipped bit in a layer (the header intact): a new mtime, so read again, and refused.
  flip_bit_in_last_layer(s.chunk_path(a), /*keep_mtime=*/false);
  CHECK_FALSE(s.has_valid(a));
  CHECK_FALSE(KvStore::open_for_read(tmp.path / "store", "model-a").has_valid(a));  // a fresh process too
  put(s, a);  // precompute rewrites it
  CHECK(s.has_valid(a));

  // A change within the same mtime tick as the recording (racy, as git calls it) is still seen:
  // a line recorded within kRacySeconds of the file's mtime does not count.
  flip_bit_in_last_layer(s.chunk_path(b), /*keep_mtime=*/true);
  CHECK_FALSE(KvStore::open_for_read(tmp.path / "store", "model-a").has_valid(b));
  put(s, b, 2);

  // The documented limit of the cheap check: on a file verified well after its mtime, a flip that
  // keeps size, mtime and inode is trusted by has_valid — and found by a full verification.
  const auto old = fs::last_write_time(s.chunk_path(b)) - std::chrono::seconds(10);
  fs::last_write_time(s.chunk_path(b), old);
  CHECK(KvStore::open_for_read(tmp.path / "store", "model-a").has_valid(b));  // read in full, recorded
  flip_bit_in_last_layer(s.chunk_path(b), /*keep_mtime=*/true);
  CHECK(KvStore::open_for_read(tmp.path / "store", "model-a").has_valid(b));
  const auto rep = ragkv::inspect_store(ragkv::open_store_for_inspection(tmp.path / "store"), true);
  REQUIRE(find(rep, s.chunk_path(b)));
  CHECK(find(rep, s.chunk_path(b))->problem.find("layer 2 checksum mismatch") != std::string::npos);

  // A torn or foreign line in the log is ignored, not an error.
  std::ofstream(tmp.path / "store" / "verified.log", std::ios::app) << "garbage line\nhalf 12";
  CHECK(KvStore::open_for_read(tmp.path / "store", "model-a").has_valid(a));
}

TEST_CASE("store check: verify finds each fault class, repair removes exactly the bad files and dead temporaries") {
  TempDir tmp("store-verify");
  const fs::path dir = tmp.path / "store";
  const KvStore s = KvStore::open_for_write(dir, info());
  const ChunkKvMeta good = meta("good"), flipped = meta("flipped"), truncated = meta("truncated");
  ChunkKvMeta variant = meta("good");
  variant.context = {"other#0"};
  for (const auto& m : {good, flipped, truncated, variant}) put(s, m);
  flip_bit_in_last_layer(s.chunk_path(flipped), false);
  fs::resize_file(s.chunk_path(truncated), fs::file_size(s.chunk_path(truncated)) - 9);
  // Another model's file, and a good file under another chunk's name.
  const fs::path foreign = dir / "kv" / "00000000000000aa.rkv";
  ragkv::write_chunk_kv(foreign, meta("x", "model-b"),
                        std::vector<const uint16_t*>(3, std::vector<uint16_t>(48).data()),
                        std::vector<const uint16_t*>(3, std::vector<uint16_t>(48).data()));
  const fs::path misnamed = dir / "kv" / "00000000000000bb.rkv";
  fs::copy_file(s.chunk_path(good), misnamed);
  // Temporaries: a dead writer's on this machine (stale), a live one's (this process), another
  // machine's, and files ragkv did not name (never touched).
  const fs::path dead = ragkv::temporary_path(s.chunk_path(good), dead_pid(), 7);
  const fs::path live = ragkv::temporary_path(s.chunk_path(good), long(::getpid()), 8);
  const std::string other_host = s.chunk_path(good).filename().string() + ".ragkv-tmp.00000000.1.9";
  for (const fs::path& p : {dead, live, dir / "kv" / other_host, dir / "kv" / "x.rkv.tmp.1.2", dir / "kv" / "notes.txt"})
    std::ofstream(p) << "partial";

  const KvStore insp = ragkv::open_store_for_inspection(dir);
  const ragkv::StoreReport rep = ragkv::inspect_store(insp, true);
  CHECK(rep.files.size() == 6);
  CHECK(rep.bad() == 4);
  auto problem = [&](const fs::path& p) {
    const auto* f = find(rep, p);
    REQUIRE(f);
    return f->problem;
  };
  CHECK(problem(s.chunk_path(good)).empty());
  CHECK(problem(s.chunk_path(variant)).empty());
  CHECK(find(rep, s.chunk_path(variant))->variant);
  CHECK(problem(s.chunk_path(flipped)).find("layer 2 checksum mismatch") != std::string::npos);
  CHECK(problem(s.chunk_path(truncated)).find("truncated") != std::string::npos);
  CHECK(problem(foreign).find("written by model model-b") != std::string::npos);
  CHECK(problem(misnamed).find("misnamed") != std::string::npos);
  CHECK(rep.stale_temporaries == std::vector<std::string>{dead.filename().string()});
  CHECK(rep.unknown == std::vector<std::string>{"notes.txt", "x.rkv.tmp.1.2"});

  // Headers only (stats): the flipped layer is not seen, the rest are.
  CHECK(ragkv::inspect_store(insp, false).bad() == 3);
  CHECK_THROWS_AS(ragkv::remove_bad_files(insp, ragkv::inspect_store(insp, false)), ragkv::Error);

  CHECK(ragkv::remove_bad_files(insp, rep) == 5);
  for (const fs::path& p : {s.chunk_path(flipped), s.chunk_path(truncated), foreign, misnamed, dead})
    CHECK_FALSE(fs::exists(p));
  for (const fs::path& p : {s.chunk_path(good), s.chunk_path(variant), live, dir / "kv" / other_host,
                            dir / "kv" / "x.rkv.tmp.1.2", dir / "kv" / "notes.txt"})
    CHECK(fs::exists(p));
  CHECK(ragkv::inspect_store(insp, true).bad() == 0);
  // The log now holds the two intact files only.
  const std::string log = ragkv::read_file(dir / "verified.log");
  CHECK(log.find(s.chunk_path(good).filename().string()) != std::string::npos);
  CHECK(std::count(log.begin(), log.end(), '\n') == 2);

  // The store's own sweep (open_for_write) agrees: only the dead writer's temporary would go.
  std::ofstream(dead) << "again";
  CHECK(KvStore::open_for_write(dir, info()).remove_stale_temporaries() == 0);  // open_for_write swept it already
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
}

TEST_CASE("store check: temporary names carry a marker, host and pid, and nothing else is taken for one") {
  const fs::path t = ragkv::temporary_path("/s/kv/0123456789abcdef.rkv", 4242, 0xbeef);
  const auto o = ragkv::temporary_owner(t);
  REQUIRE(o);
  CHECK(o->target == "0123456789abcdef.rkv");
  CHECK(o->pid == 4242);
  CHECK(o->this_host);
  CHECK_FALSE(ragkv::is_stale_temporary(ragkv::temporary_path("a.rkv", long(::getpid()), 1)));  // alive
  CHECK(ragkv::is_stale_temporary(ragkv::temporary_path("a.rkv", dead_pid(), 1)));
  for (const char* name : {"a.rkv.tmp.1.2", "a.rkv.ragkv-tmp.1.2", "a.rkv.ragkv-tmp.0000000g.1.2",
                           "a.rkv.ragkv-tmp.00000000.x.2", "a.rkv.ragkv-tmp.00000000.1.", ".ragkv-tmp.00000000.1.2",
                           "a.rkv.ragkv-tmp.00000000.1.2.3", "a.rkv"}) {
    INFO(name);
    CHECK_FALSE(ragkv::temporary_owner(name));
    CHECK_FALSE(ragkv::is_stale_temporary(name));
  }
  const auto other = ragkv::temporary_owner("a.rkv.ragkv-tmp.00000000.1.2");
  REQUIRE(other);
  CHECK_FALSE(other->this_host);  // (no host hashes to 00000000 here: the test would say so)
  CHECK_FALSE(ragkv::is_stale_temporary("a.rkv.ragkv-tmp.00000000.1.2"));
}

TEST_CASE("store check: a directory where a file belongs is an error naming its path") {
  TempDir tmp("store-dir");
  fs::create_directories(tmp.path / "store" / "store.json");
  try {
    (void)KvStore::open_for_read(tmp.path / "store", "model-a");
    FAIL("no error");
  } catch (const ragkv::Error& e) {
    CHECK(std::string(e.what()) ==
          (tmp.path / "store" / "store.json").string() + ": cannot open for reading: a directory, not a regular file");
  }
}

TEST_CASE("cli store: verify and repair, and precompute repairing a flipped bit byte for byte" * doctest::test_suite("check")) {
  using ragkv::test::run_ragkv;
  TempDir tmp("cli-store");
  const std::string index = (tmp.path / "index").string(), store = (tmp.path / "store").string();
  auto r = run_ragkv("build-index --threads 2 --corpus '" + ragkv::test::testdata("rag-mini.corpus.jsonl").string() +
                     "' --out '" + index + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string pc = "precompute --threads 2 --neighbours 0 --index '" + index + "' --store '" + store + "'";
  r = run_ragkv(pc);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::vector<std::pair<fs::path, std::string>> original;
  for (const auto& e : fs::directory_iterator(tmp.path / "store" / "kv"))
    original.emplace_back(e.path(), ragkv::read_file(e.path()));
  std::sort(original.begin(), original.end());
  REQUIRE(original.size() == 7);  // the prefix and 6 chunks
  auto same_as_original = [&] {
    for (const auto& [p, bytes] : original) {
      INFO(p.string());
      REQUIRE(fs::exists(p));
      CHECK(ragkv::read_file(p) == bytes);
    }
  };

  r = run_ragkv("store verify --store '" + store + "'");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(nlohmann::json::parse(r.out)["intact"] == 7);

  // The reproducer: one flipped byte mid-file; precompute used to skip it.
  flip_bit_in_last_layer(original[2].first, false);
  r = run_ragkv("store verify --store '" + store + "'");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(original[2].first.string() + ": layer ") != std::string::npos);
  CHECK(nlohmann::json::parse(r.out)["bad"].size() == 1);
  r = run_ragkv(pc);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["computed"].get<int>() + j["skipped"].get<int>() == 6);
  same_as_original();

  // store repair --index: a truncated chunk and a flipped prefix, computed again.
  flip_bit_in_last_layer(original[0].first, false);
  fs::resize_file(original[5].first, 100);
  r = run_ragkv("store repair --threads 2 --store '" + store + "' --index '" + index + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto rj = nlohmann::json::parse(r.out);
  CHECK(rj["removed"] == 2);
  CHECK(rj["still_missing"] == 0);
  same_as_original();
  r = run_ragkv("store stats --store '" + store + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto sj = nlohmann::json::parse(r.out);
  CHECK(sj["files"] == 7);
  CHECK(sj["per_model"][sj["model_fingerprint"].get<std::string>()]["chunks"] == 6);
  CHECK(sj["per_model"][sj["model_fingerprint"].get<std::string>()]["prefixes"] == 1);
}

// A store nothing planted in it can hang or redirect: a FIFO, a directory or a symbolic link at any
// name ragkv opens is refused without blocking, never followed out of the store, and repairable.
TEST_CASE("hostile store: a FIFO at a cache, store.json or verified.log never blocks a reader") {
  const TempDir tmp("hostile-fifo");
  const fs::path dir = tmp.path / "store";
  const KvStore s = KvStore::open_for_write(dir, info());
  const ChunkKvMeta a = meta("a"), b = meta("b");
  put(s, a);
  put(s, b);
  const fs::path pa = s.chunk_path(a);
  fs::remove(pa);
  REQUIRE(::mkfifo(pa.c_str(), 0644) == 0);  // no writer ever opens it: a blocking open would hang
  const KvStore r = KvStore::open_for_read(dir, "model-a");
  CHECK_FALSE(r.has_valid(a));
  CHECK_THROWS_WITH_AS(r.open_chunk(a), doctest::Contains("a FIFO, not a regular file"), ragkv::CacheFileError);
  CHECK(r.has_valid(b));
  const ragkv::StoreReport rep = ragkv::inspect_store(r, true);
  REQUIRE(find(rep, pa) != nullptr);
  CHECK(find(rep, pa)->problem.find("a FIFO") != std::string::npos);
  CHECK(rep.bad() == 1);
  CHECK(ragkv::remove_bad_files(r, rep) == 1);  // moved aside, not deleted
  CHECK_FALSE(fs::exists(fs::symlink_status(pa)));
  CHECK(fs::is_fifo(dir / ragkv::kSetAsideDir / pa.filename()));
  CHECK(ragkv::inspect_store(r, true).bad() == 0);

  fs::remove(dir / "verified.log");
  REQUIRE(::mkfifo((dir / "verified.log").c_str(), 0644) == 0);
  const KvStore r2 = KvStore::open_for_read(dir, "model-a");
  CHECK(r2.has_valid(b));  // the log is unreadable: b is verified again, and nothing blocks

  fs::remove(dir / "store.json");
  REQUIRE(::mkfifo((dir / "store.json").c_str(), 0644) == 0);
  CHECK_THROWS_WITH_AS(KvStore::open_for_read(dir, "model-a"),
                       doctest::Contains(((dir / "store.json").string() + ": cannot open for reading: a FIFO").c_str()), ragkv::Error);
}

TEST_CASE("hostile store: links out of the store are never followed, for reading or writing") {
  const TempDir tmp("hostile-link");
  const fs::path dir = tmp.path / "store";
  const KvStore s = KvStore::open_for_write(dir, info());
  const ChunkKvMeta a = meta("a"), b = meta("b");
  put(s, a);
  // verified.log linked to a file outside: appends go nowhere, the victim is untouched.
  { std::ofstream(tmp.path / "victim") << "victim\n"; }
  fs::remove(dir / "verified.log");
  fs::create_symlink(tmp.path / "victim", dir / "verified.log");
  put(s, b);
  const KvStore r = KvStore::open_for_read(dir, "model-a");
  CHECK(r.has_valid(a));
  CHECK(ragkv::read_file(tmp.path / "victim") == "victim\n");
  // A cache linked to a valid cache elsewhere is not read through the link.
  const fs::path pa = s.chunk_path(a);
  fs::rename(pa, tmp.path / "outside.rkv");
  fs::create_symlink(tmp.path / "outside.rkv", pa);
  CHECK_FALSE(r.has_valid(a));
  CHECK_THROWS_WITH_AS(r.open_chunk(a), doctest::Contains("a symbolic link, not a regular file"), ragkv::CacheFileError);
  // A dangling variants.lock: an error naming it, and no file is created where it points.
  fs::create_symlink(tmp.path / "created-outside", dir / "variants.lock");
  CHECK_THROWS_WITH_AS(ragkv::StoreLock lock(dir), doctest::Contains("variants.lock: cannot open the lock file: a symbolic link"),
                       ragkv::Error);
  CHECK_FALSE(fs::exists(fs::symlink_status(tmp.path / "created-outside")));
}

TEST_CASE("hostile store: a directory at a cache's name is moved aside by repair, then the cache is written again") {
  const TempDir tmp("hostile-dir");
  const fs::path dir = tmp.path / "store";
  const KvStore s = KvStore::open_for_write(dir, info());
  const ChunkKvMeta a = meta("a");
  const fs::path pa = s.chunk_path(a);
  fs::create_directories(pa / "inside");
  CHECK_THROWS_WITH_AS(put(s, a), doctest::Contains("store repair"), ragkv::Error);  // says how to fix it
  const ragkv::StoreReport rep = ragkv::inspect_store(s, true);
  REQUIRE(find(rep, pa) != nullptr);
  CHECK(find(rep, pa)->problem.find("a directory, not a regular file") != std::string::npos);
  CHECK(ragkv::remove_bad_files(s, rep) == 1);
  CHECK(fs::is_directory(dir / ragkv::kSetAsideDir / pa.filename() / "inside"));  // kept, not deleted
  put(s, a);
  CHECK(s.has_valid(a));
}

TEST_CASE("open_regular_file: regular files only, without blocking or following") {
  const TempDir tmp("regular-file");
  const fs::path f = tmp.path / "f", fifo = tmp.path / "fifo", link = tmp.path / "link";
  { std::ofstream(f) << "x"; }
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  fs::create_symlink(f, link);
  std::string why;
  const int fd = ragkv::open_regular_file(f, O_RDONLY, &why);
  CHECK(fd >= 0);
  CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
  ::close(fd);
  CHECK(ragkv::open_regular_file(fifo, O_RDONLY, &why) < 0);
  CHECK(why == "a FIFO, not a regular file");
  CHECK(ragkv::open_regular_file(fifo, O_WRONLY, &why) < 0);  // no reader: ENXIO, still named
  CHECK(why == "a FIFO, not a regular file");
  CHECK(ragkv::open_regular_file(link, O_RDONLY, &why) < 0);
  CHECK(why == "a symbolic link, not a regular file");
  CHECK(ragkv::open_regular_file(tmp.path, O_RDONLY, &why) < 0);
  CHECK(why == "a directory, not a regular file");
  CHECK(ragkv::read_regular_file(f) == "x");
  CHECK_THROWS_WITH_AS(ragkv::read_regular_file(fifo), doctest::Contains((fifo.string() + ": cannot open for reading: a FIFO").c_str()),
                       ragkv::Error);
}
