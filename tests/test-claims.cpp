// Claims between processes sharing a store (work claimed, not duplicated): a claim is
// acquired once, held against other claimants and released; a dead owner's claim (this machine,
// pid gone), another machine's claim expired by its mtime or watched unchanged for a lease are
// taken over; the heartbeat keeps a live claim live past its lease; two workers computing the same
// files compute each exactly once; a file claimed by a live other is passed over and done after
// its release (or counted as the other's when it appears); verify and repair see stale claims and
// the sweep removes only dead writers' claim temporaries.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/kv/claim-set.h"
#include "core/kv/claimed-work.h"
#include "core/kv/kv-store.h"
#include "core/kv/store-check.h"
#include "core/util/file-io.h"
#include "core/util/process-identity.h"
#include "tests/test-tempdir.h"

namespace {

namespace fs = std::filesystem;
using ragkv::ClaimSet;
using ragkv::test::TempDir;
using Result = ragkv::ClaimSet::Result;

long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return long(child);
}

// A claim record as another claimant would write it.
ragkv::ClaimRecord record(ragkv::ProcessIdentity owner, double lease, const std::string& token) {
  ragkv::ClaimRecord r;
  r.owner = std::move(owner);
  r.started_unix_ms = 1;
  r.lease_seconds = lease;
  r.token = token;
  return r;
}

void set_mtime_seconds_ago(const fs::path& p, int seconds) {
  timespec t[2];
  ::clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= seconds;
  t[1] = t[0];
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), t, 0) == 0);
}

ragkv::KvStoreInfo info() {
  ragkv::KvStoreInfo i;
  i.model_fingerprint = "model-a";
  i.model_name = "a.gguf";
  i.n_layer = 1;
  i.n_kv_head = 1;
  i.head_dim = 2;
  return i;
}

}  // namespace

TEST_CASE("claims: acquired once, held against another claimant, released, acquired again") {
  TempDir tmp("claims-basic");
  const fs::path file = tmp.path / "0123456789abcdef.rkv";
  ClaimSet a(60), b(60);
  CHECK(a.try_claim(file) == Result::acquired);
  const fs::path claim = ragkv::claim_path(file);
  REQUIRE(fs::exists(claim));
  const auto rec = ragkv::parse_claim(ragkv::read_file(claim));
  REQUIRE(rec);
  CHECK(rec->owner.pid == long(::getpid()));
  CHECK(rec->owner.host == ragkv::this_process().host);
  CHECK(rec->owner.start_ticks == ragkv::this_process().start_ticks);
  CHECK(rec->lease_seconds == 60);
  CHECK(a.try_claim(file) == Result::acquired);  // a set holding it already
  CHECK(b.try_claim(file) == Result::held_by_other);
  CHECK(ragkv::inspect_claim(claim)->status == ragkv::ClaimStatus::live);
  b.release(file);  // not b's: left alone
  CHECK(fs::exists(claim));
  a.release(file);
  CHECK_FALSE(fs::exists(claim));
  CHECK(b.try_claim(file) == Result::acquired);
  {
    ClaimSet c(60);
    CHECK(c.try_claim(tmp.path / "other.rkv") == Result::acquired);
  }  // its destructor releases what it holds
  CHECK_FALSE(fs::exists(ragkv::claim_path(tmp.path / "other.rkv")));
  CHECK(ragkv::is_claim_name("0123456789abcdef.rkv.claim"));
  CHECK_FALSE(ragkv::is_claim_name("notes.claim"));
  CHECK_FALSE(ragkv::parse_claim("{\"format\":\"other\"}"));
  CHECK_FALSE(ragkv::parse_claim("not json"));
}

TEST_CASE("claims: a dead owner's claim on this machine is taken over, a pid reused by another process too") {
  TempDir tmp("claims-dead");
  const fs::path file = tmp.path / "a.rkv", claim = ragkv::claim_path(file);
  ragkv::ProcessIdentity dead = ragkv::this_process();
  dead.pid = dead_pid();
  std::ofstream(claim) << ragkv::claim_text(record(dead, 600, "dead"));
  CHECK(ragkv::inspect_claim(claim)->status == ragkv::ClaimStatus::dead_owner);
  ClaimSet s(60);
  CHECK(s.try_claim(file) == Result::taken_over);
  CHECK(ragkv::parse_claim(ragkv::read_file(claim))->owner.pid == long(::getpid()));
  s.release(file);

  // This process's pid with another start time: the pid was reused, its owner is gone.
  ragkv::ProcessIdentity reused = ragkv::this_process();
  reused.start_ticks += 1;
  std::ofstream(claim) << ragkv::claim_text(record(reused, 600, "reused"));
  CHECK(ragkv::inspect_claim(claim)->status == ragkv::ClaimStatus::dead_owner);
  CHECK(s.try_claim(file) == Result::taken_over);
  // Nothing left beside it (the stale claim was renamed aside and removed).
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(tmp.path)) n += e.path() != claim;
  CHECK(n == 0);
}

TEST_CASE("claims: another machine's claim goes stale by its mtime or by a lease watched unchanged") {
  TempDir tmp("claims-remote");
  ragkv::ProcessIdentity remote;
  remote.host = "some-other-host";
  remote.boot_id = "x";
  remote.pid = 1;
  const fs::path a = tmp.path / "a.rkv", b = tmp.path / "b.rkv";
  ClaimSet s(60);

  // Refreshed 5 minutes ago with a 60 s lease: older than twice its lease.
  std::ofstream(ragkv::claim_path(a)) << ragkv::claim_text(record(remote, 60, "ra"));
  set_mtime_seconds_ago(ragkv::claim_path(a), 300);
  CHECK(ragkv::inspect_claim(ragkv::claim_path(a))->status == ragkv::ClaimStatus::expired);
  CHECK(s.try_claim(a) == Result::taken_over);

  // Fresh by its mtime (clocks may differ between machines), but never refreshed: stale once this
  // set has seen it unchanged for its lease (0.3 s), whatever the clocks say.
  std::ofstream(ragkv::claim_path(b)) << ragkv::claim_text(record(remote, 0.3, "rb"));
  CHECK(s.try_claim(b) == Result::held_by_other);
  CHECK(s.try_claim(b) == Result::held_by_other);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(s.try_claim(b) == Result::taken_over);

  // A claim file that does not parse has the default lease, by its mtime.
  const fs::path c = tmp.path / "c.rkv";
  std::ofstream(ragkv::claim_path(c)) << "garbage";
  CHECK(ragkv::inspect_claim(ragkv::claim_path(c))->status == ragkv::ClaimStatus::live);
  CHECK(s.try_claim(c) == Result::held_by_other);
  set_mtime_seconds_ago(ragkv::claim_path(c), int(3 * ragkv::kDefaultClaimLeaseSeconds));
  CHECK(s.try_claim(c) == Result::taken_over);
}

TEST_CASE("claims: the heartbeat keeps a claim live past its lease, and a watcher never takes it") {
  TempDir tmp("claims-heartbeat");
  const fs::path file = tmp.path / "a.rkv";
  ClaimSet owner(0.5), watcher(0.5);
  REQUIRE(owner.try_claim(file) == Result::acquired);
  const auto first = ragkv::file_stamp(ragkv::claim_path(file));
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);  // 3 leases
  while (std::chrono::steady_clock::now() < end) {
    CHECK(watcher.try_claim(file) == Result::held_by_other);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(ragkv::file_stamp(ragkv::claim_path(file))->mtime_ns > first->mtime_ns);
  owner.release(file);
  CHECK(watcher.try_claim(file) == Result::acquired);
}

TEST_CASE("claimed work: two workers computing the same files compute each exactly once") {
  TempDir tmp("claims-work");
  std::vector<std::vector<fs::path>> items;
  for (int i = 0; i < 24; ++i) items.push_back({tmp.path / fmt::format("f{}.rkv", i)});
  std::mutex mu;
  std::map<fs::path, int> computed;
  auto intact = [](const fs::path& f) { return fs::exists(f); };
  auto compute = [&](size_t, const std::vector<fs::path>& files) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (const fs::path& f : files) {
      ragkv::write_file_atomic(f, {"x"});
      std::lock_guard lk(mu);
      ++computed[f];
    }
  };
  ragkv::ClaimedWorkStats s1, s2;
  std::thread t1([&] {
    ClaimSet c(5);
    s1 = ragkv::run_claimed_work(c, items, intact, compute);
  });
  std::thread t2([&] {
    ClaimSet c(5);
    s2 = ragkv::run_claimed_work(c, items, intact, compute);
  });
  t1.join();
  t2.join();
  CHECK(s1.computed + s2.computed == 24);
  CHECK(s1.computed + s1.claimed_by_other == 24);
  CHECK(s2.computed + s2.claimed_by_other == 24);
  CHECK(computed.size() == 24);
  for (const auto& [f, n] : computed) CHECK_MESSAGE(n == 1, f.string());
  for (const auto& e : fs::directory_iterator(tmp.path)) CHECK(e.path().extension() == ".rkv");  // no claims left
}

TEST_CASE("claimed work: a file claimed by a live other is passed over, then done after its release") {
  TempDir tmp("claims-defer");
  std::vector<std::vector<fs::path>> items;
  for (int i = 0; i < 4; ++i) items.push_back({tmp.path / fmt::format("f{}.rkv", i)});
  auto intact = [](const fs::path& f) { return fs::exists(f); };

  SUBCASE("released without the file: this worker computes it, last") {
    ClaimSet other(5);
    REQUIRE(other.try_claim(items[1][0]) == Result::acquired);
    std::vector<size_t> order;
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      other.release(items[1][0]);
    });
    ClaimSet mine(5);
    const auto st = ragkv::run_claimed_work(mine, items, intact, [&](size_t i, const std::vector<fs::path>& files) {
      order.push_back(i);
      for (const fs::path& f : files) ragkv::write_file_atomic(f, {"x"});
    });
    releaser.join();
    CHECK(st.computed == 4);
    CHECK(st.claimed_by_other == 0);
    CHECK(order == std::vector<size_t>{0, 2, 3, 1});
  }
  SUBCASE("written by its claimant: counted as the other's, not computed") {
    ClaimSet other(5);
    REQUIRE(other.try_claim(items[2][0]) == Result::acquired);
    std::thread writer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ragkv::write_file_atomic(items[2][0], {"theirs"});
      other.release(items[2][0]);
    });
    ClaimSet mine(5);
    size_t progress_total = 0, progress_done = 0;
    const auto st = ragkv::run_claimed_work(
        mine, items, intact,
        [&](size_t, const std::vector<fs::path>& files) {
          for (const fs::path& f : files) ragkv::write_file_atomic(f, {"x"});
        },
        [&](size_t done, size_t total) {
          progress_done = done;
          progress_total = total;
        });
    writer.join();
    CHECK(st.computed == 3);
    CHECK(st.claimed_by_other == 1);
    CHECK(ragkv::read_file(items[2][0]) == "theirs");
    CHECK(progress_total == 4);
    CHECK(progress_done == 4);
  }
  SUBCASE("its claimant died: taken over") {
    ragkv::ProcessIdentity dead = ragkv::this_process();
    dead.pid = dead_pid();
    std::ofstream(ragkv::claim_path(items[3][0])) << ragkv::claim_text(record(dead, 600, "dead"));
    ClaimSet mine(5);
    const auto st = ragkv::run_claimed_work(mine, items, intact, [&](size_t, const std::vector<fs::path>& files) {
      for (const fs::path& f : files) ragkv::write_file_atomic(f, {"x"});
    });
    CHECK(st.computed == 4);
    CHECK(st.taken_over == 1);
    CHECK_FALSE(fs::exists(ragkv::claim_path(items[3][0])));
  }
}

TEST_CASE("claims: a finished file's stale claim is removed, a live owner's kept") {
  TempDir tmp("claims-finished");
  const fs::path a = tmp.path / "00000000000000aa.rkv", b = tmp.path / "00000000000000bb.rkv";
  ragkv::ProcessIdentity dead = ragkv::this_process();
  dead.pid = dead_pid();
  std::ofstream(ragkv::claim_path(a)) << ragkv::claim_text(record(dead, 600, "dead"));
  ClaimSet live(60);
  REQUIRE(live.try_claim(b) == Result::acquired);
  CHECK(ragkv::remove_stale_claim_of_finished(a));
  CHECK_FALSE(fs::exists(ragkv::claim_path(a)));
  CHECK_FALSE(ragkv::remove_stale_claim_of_finished(b));
  CHECK(fs::exists(ragkv::claim_path(b)));
  CHECK_FALSE(ragkv::remove_stale_claim_of_finished(tmp.path / "00000000000000cc.rkv"));  // no claim
}

TEST_CASE("claims in a store: verify lists stale claims, repair removes them, the sweep only dead claim temporaries") {
  TempDir tmp("claims-store");
  const fs::path dir = tmp.path / "store";
  const ragkv::KvStore s = ragkv::KvStore::open_for_write(dir, info());
  const fs::path kv = dir / "kv";
  ragkv::ProcessIdentity dead = ragkv::this_process();
  dead.pid = dead_pid();
  const fs::path stale = ragkv::claim_path(kv / "00000000000000aa.rkv");
  std::ofstream(stale) << ragkv::claim_text(record(dead, 600, "dead"));
  ClaimSet live(60);
  REQUIRE(live.try_claim(kv / "00000000000000bb.rkv") == Result::acquired);
  // A claim temporary of a dead writer (killed between writing it and linking it) and of a live one.
  const fs::path dead_tmp = ragkv::temporary_path(kv / "00000000000000cc.rkv.claim", dead.pid, 3);
  const fs::path live_tmp = ragkv::temporary_path(kv / "00000000000000dd.rkv.claim", long(::getpid()), 4);
  std::ofstream(dead_tmp) << "x";
  std::ofstream(live_tmp) << "x";

  const auto rep = ragkv::inspect_store(ragkv::open_store_for_inspection(dir), true);
  CHECK(rep.stale_claims == std::vector<std::string>{stale.filename().string()});
  CHECK(rep.claims == std::vector<std::string>{"00000000000000bb.rkv.claim"});
  CHECK(rep.stale_temporaries == std::vector<std::string>{dead_tmp.filename().string()});
  CHECK(rep.bad() == 0);

  // The sweep at open: the dead claim temporary only (claims are taken over by whoever needs the
  // chunk, and counted there).
  (void)ragkv::KvStore::open_for_write(dir, info());
  CHECK_FALSE(fs::exists(dead_tmp));
  CHECK(fs::exists(live_tmp));
  CHECK(fs::exists(stale));

  CHECK(ragkv::remove_bad_files(ragkv::open_store_for_inspection(dir), rep) == 1);
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(ragkv::claim_path(kv / "00000000000000bb.rkv")));
}

TEST_CASE("create_file_exclusive: whole file or none, and never over an existing one") {
  TempDir tmp("create-excl");
  const fs::path p = tmp.path / "f";
  CHECK(ragkv::create_file_exclusive(p, "first"));
  CHECK_FALSE(ragkv::create_file_exclusive(p, "second"));
  CHECK(ragkv::read_file(p) == "first");
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(tmp.path)) n += e.path() != p;
  CHECK(n == 0);  // no temporary left
  // Many threads at once: exactly one wins.
  std::atomic<int> wins{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] { wins += ragkv::create_file_exclusive(tmp.path / "g", std::to_string(i)) ? 1 : 0; });
  for (auto& t : ts) t.join();
  CHECK(wins == 1);
}

TEST_CASE("claims: a zombie owner (killed, not yet reaped) is gone, not running") {
  TempDir tmp("claims-zombie");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  // Until waitpid the child is a zombie: kill(pid, 0) still succeeds.
  ragkv::ProcessIdentity z = ragkv::this_process();
  z.pid = long(child);
  auto state = [&] {  // field 3 of /proc/<pid>/stat
    std::ifstream f("/proc/" + std::to_string(child) + "/stat");
    const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = s.rfind(") ");
    return close == std::string::npos ? '?' : s[close + 2];
  };
  for (int i = 0; i < 400 && state() != 'Z'; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(state() == 'Z');
  CHECK(::kill(child, 0) == 0);  // a zombie: the pid is still taken
  CHECK(ragkv::process_state(z) == ragkv::ProcessState::gone);
  const fs::path file = tmp.path / "a.rkv", claim = ragkv::claim_path(file);
  std::ofstream(claim) << ragkv::claim_text(record(z, 3000, "zombie"));
  CHECK(ragkv::inspect_claim(claim)->status == ragkv::ClaimStatus::dead_owner);
  ClaimSet s(60);
  CHECK(s.try_claim(file) == Result::taken_over);
  int status = 0;
  ::waitpid(child, &status, 0);
}

TEST_CASE("claims: a lease is at most an hour, whatever the claim file says, and a wait says whose claim it is") {
  TempDir tmp("claims-lease");
  ragkv::ProcessIdentity remote;
  remote.host = "some-other-host";
  remote.boot_id = "x";
  remote.pid = 4242;
  const fs::path claim = ragkv::claim_path(tmp.path / "a.rkv");
  std::ofstream(claim) << ragkv::claim_text(record(remote, 1e308, "huge"));
  CHECK(ragkv::parse_claim(ragkv::read_file(claim))->lease_seconds == ragkv::kMaxClaimLeaseSeconds);
  set_mtime_seconds_ago(claim, 2 * 3600 + 10);  // older than twice the capped lease: expired
  CHECK(ragkv::inspect_claim(claim)->status == ragkv::ClaimStatus::expired);
  set_mtime_seconds_ago(claim, 600);
  const auto seen = ragkv::inspect_claim(claim);
  CHECK_FALSE(seen->stale());
  CHECK(seen->lease_seconds() == ragkv::kMaxClaimLeaseSeconds);
  const std::string d = seen->describe();
  CHECK(d.find("pid 4242 on host some-other-host (another machine)") != std::string::npos);
  CHECK(d.find("taken over in at most 3600 s") != std::string::npos);
  CHECK_THROWS_WITH_AS(ClaimSet(1e9), doctest::Contains("at most 3600 s"), ragkv::Error);
}

TEST_CASE("claims: a FIFO planted at a claim's name neither blocks nor stops the work") {
  TempDir tmp("claims-fifo");
  const fs::path file = tmp.path / "a.rkv", claim = ragkv::claim_path(file);
  REQUIRE(::mkfifo(claim.c_str(), 0644) == 0);
  CHECK_FALSE(ragkv::inspect_claim(claim).has_value());
  ClaimSet s(60);
  CHECK(s.try_claim(file) == Result::acquired);  // computed unclaimed (a warning says so)
  s.release(file);
  CHECK(fs::is_fifo(claim));
}
