// The Slurm recipe (scripts/slurm/) for real: a one-node cluster on loopback (munged, slurmctld,
// slurmd; scripts/slurm/local-cluster.sh) in a temp dir, the bundled rag-mini data with the default
// model, 3 shards. submit.sh's jobs (build-index → precompute array → answer arrays → merges) must
// end COMPLETED and give what one process gives: the same store byte for byte; in `full` the same
// records and computed tokens; in `prefix` the same answers (a shard's knowledge tree sees only its
// own queries, so it may compute more); in `auto` what differs is reported. Then a precompute task
// killed (SIGKILL) mid-run and submitted again finishes the shard, reusing every file the killed
// task stored. ctest labels: check and slurm. Where the daemons cannot start (packages missing, not
// root) the case says "skipped", except under RAGKV_REQUIRE_SLURM=1 (.ci/run), where that fails.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/format/checksum.h"
#include "core/util/file-io.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr auto q = &ragkv::test::shell_quote;
using ragkv::test::store_files;

struct Shell {
  int rc = 0;
  std::string out;
};
// Runs a shell command; stdout captured, stderr into the file err (appended).
Shell sh(const std::string& cmd, const fs::path& err) {
  Shell r;
  FILE* p = popen((cmd + " 2>>" + q(err)).c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string slurm_script(const char* name) { return q(ragkv::test::source_dir() / "scripts" / "slurm" / name); }

// The cluster, stopped (its daemons killed) with the object.
struct LocalCluster {
  fs::path dir;
  std::string env;  // "export SLURM_CONF=…; " for every command that talks to it
  bool up = false;
  std::string why;  // when not up

  explicit LocalCluster(const fs::path& d) : dir(d) {
    const Shell r = sh("bash " + slurm_script("local-cluster.sh") + " start " + q(dir), dir.parent_path() / "cluster.err");
    up = r.rc == 0;
    if (up) env = r.out.substr(0, r.out.find('\n')) + "; ";
    else why = fmt::format("exit {}: {}", r.rc, ragkv::read_file(dir.parent_path() / "cluster.err"));
    if (!up && r.rc != 2) FAIL("local-cluster.sh start failed: " << why);
  }
  ~LocalCluster() { std::system(("bash " + slurm_script("local-cluster.sh") + " stop " + q(dir) + " >/dev/null 2>&1").c_str()); }
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;
};


// Shard (of 3) that computes a canonical chunk cache, by its name (precompute --shard). (A
// shard's neighbour variants may belong to other shards' chunks: they are shared out by claims.)
int owner(const std::string& canonical_file_name) { return int(ragkv::checksum64(canonical_file_name) % 3); }

size_t count_files(const fs::path& store) {
  size_t n = 0;
  if (fs::exists(store / "kv"))
    for (const auto& e : fs::directory_iterator(store / "kv")) n += e.path().extension() == ".rkv";
  return n;
}

}  // namespace

TEST_CASE("slurm: the recipe's job arrays on a loopback cluster equal one process, and a killed shard resubmitted finishes" *
          doctest::test_suite("slurm")) {
  const ragkv::test::TempDir tmp("slurm");
  LocalCluster cluster(tmp.path / "cluster");
  if (!cluster.up) {
    const char* require = std::getenv("RAGKV_REQUIRE_SLURM");
    if (require && std::string(require) == "1") FAIL("RAGKV_REQUIRE_SLURM=1 but no Slurm cluster could start: " << cluster.why);
    MESSAGE("skipped: no Slurm cluster can start here: " << cluster.why);
    return;
  }
  const fs::path err = tmp.path / "stderr.txt", work = tmp.path / "work";
  const std::string ragkv = q(ragkv::test::ragkv_binary());
  const std::string corpus = q(ragkv::test::testdata("rag-mini.corpus.jsonl"));
  const std::string queries = q(ragkv::test::testdata("rag-mini.queries.jsonl"));
  // The jobs and the reference runs: in tmp (relative paths), the source tree's models.
  const std::string env = cluster.env + fmt::format("cd {0} && export TMPDIR={0} RAGKV_MODELS=\"${{RAGKV_MODELS:-{1}}}\" && ",
                                                    q(tmp.path), (ragkv::test::source_dir() / "models").string());
  auto must = [&](const std::string& cmd) {
    const Shell r = sh(env + cmd, err);
    REQUIRE_MESSAGE(r.rc == 0, cmd << "\n" << ragkv::read_file(err));
    return r.out;
  };
  const std::string answer_args = "--top-k 3 --max-tokens 8";

  // The recipe: 3 shards, three modes, waited for; every job and array task COMPLETED.
  must("bash " + slurm_script("submit.sh") + " --work " + q(work) + " --corpus " + corpus + " --queries " + queries +
       " --shards 3 --modes full,prefix,auto --ragkv " + ragkv + " --answer-args " + q(answer_args) + " --wait");

  // One process on the same index.
  const fs::path one = tmp.path / "one";
  fs::create_directories(one);
  must(ragkv + " precompute --index " + q(work / "index") + " --store " + q(one / "store") + " --threads 1 >/dev/null");
  CHECK(store_files(work / "store") == store_files(one / "store"));  // the three shards' union, byte for byte
  for (const char* mode : {"full", "prefix", "auto"}) {
    const fs::path single = one / (std::string(mode) + ".jsonl");
    must(ragkv + " answer " + queries + " --index " + q(work / "index") + " --store " + q(one / "store") + " --mode " +
         mode + " --threads 1 " + answer_args + " --out " + q(single));
    const auto a = ragkv::test::read_jsonl(single), b = ragkv::test::read_jsonl(work / "answers" / (std::string(mode) + ".jsonl"));
    REQUIRE(a.size() == 12);
    REQUIRE(b.size() == 12);
    size_t answers_differ = 0, tokens_differ = 0;
    int64_t tokens_one = 0, tokens_shards = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i]["id"] == b[i]["id"]);  // the query file's order
      CHECK(a[i]["chunks"] == b[i]["chunks"]);
      answers_differ += a[i]["answer"] != b[i]["answer"];
      const int64_t ta = a[i]["metrics"]["computed_tokens"].get<int64_t>(), tb = b[i]["metrics"]["computed_tokens"].get<int64_t>();
      tokens_differ += ta != tb;
      tokens_one += ta;
      tokens_shards += tb;
    }
    MESSAGE(std::string(mode) << ": answers differing from one process's " << answers_differ << " of 12; computed tokens differ on "
                 << tokens_differ << " (one process " << tokens_one << ", three shards " << tokens_shards << ")");
    if (std::string(mode) != "auto") CHECK(answers_differ == 0);
    if (std::string(mode) == "full") CHECK(tokens_differ == 0);
  }

  // A shard killed mid-run: task 1 of a slower precompute (4 neighbour variants per chunk) into a
  // new store, killed with SIGKILL once it has stored its first file, then submitted again.
  const fs::path store2 = work / "store2";
  const std::string pre_env = "RAGKV=" + ragkv + " RAGKV_WORK=" + q(work) + " RAGKV_STORE=" + q(store2) +
                              " RAGKV_PRECOMPUTE_ARGS='--neighbours 4 --claim-lease 2'";
  const std::string array = must(pre_env + " sbatch --parsable --export=ALL --array=0-2 --output=" + q(work / "logs" / "kill-%A_%a.out") +
                                 " " + slurm_script("precompute.sbatch"));
  const std::string job = array.substr(0, array.find_first_of(";\n"));
  auto canonical_of_1 = [&] {  // canonical caches task 1 has stored
    size_t n = 0;
    if (fs::exists(store2 / "kv"))
      for (const auto& e : fs::directory_iterator(store2 / "kv")) {
        const std::string name = e.path().filename().string();
        n += name.size() == 16 + 4 && name.ends_with(".rkv") && owner(name) == 1;
      }
    return n;
  };
  bool killed = false;
  for (int i = 0; i < 3000 && !killed; ++i) {  // up to 60 s
    const std::string state = sh(env + "squeue -h -j " + job + "_1 -o %T", err).out;
    if (state.find("RUNNING") != std::string::npos && canonical_of_1() > 0) {
      must("scancel --signal=KILL --full " + job + "_1");
      killed = true;
    } else if (i > 100 && state.empty()) {
      break;  // task 1 ended before it could be killed
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE_MESSAGE(killed, "task 1 finished before it could be killed mid-run");
  while (!sh(env + "squeue -h -j " + job + " -o %i", err).out.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const size_t stored_before = count_files(store2);  // by all three tasks; files are only ever added
  const std::string again = must(pre_env + " sbatch --parsable --export=ALL --wait --array=1 --output=" +
                                 q(work / "logs" / "again-%A_%a.out") + " " + slurm_script("precompute.sbatch"));
  const std::string again_job = again.substr(0, again.find_first_of(";\n"));
  const std::string log = ragkv::read_file(work / "logs" / ("again-" + again_job + "_1.out"));
  const json s = json::parse(log.substr(log.rfind("\n{") + 1));
  // Nothing stored was computed again: each computation of the resubmitted task added a file (what
  // the killed task had in flight, or had not begun); and there was something left to do.
  const size_t computed = s["computed"].get<size_t>() + s["variants"]["computed"].get<size_t>();
  CHECK(computed == count_files(store2) - stored_before);
  CHECK(computed >= 1);
  MESSAGE("killed precompute task: " << stored_before << " files in the store after the kill; the resubmitted task computed "
                                     << s["computed"] << " chunks and " << s["variants"]["computed"] << " variants, took over "
                                     << s["taken_over"].get<size_t>() + s["variants"]["taken_over"].get<size_t>() << " claims");
  // Complete: one process over the store computes nothing; every file verifies; no claim or temporary left.
  const json check = json::parse(must(ragkv + " precompute --index " + q(work / "index") + " --store " + q(store2) +
                                      " --neighbours 4 --threads 1"));
  CHECK(check["computed"] == 0);
  CHECK(check["variants"]["computed"] == 0);
  must(ragkv + " store verify --store " + q(store2) + " >/dev/null");
  for (const auto& e : fs::directory_iterator(store2 / "kv")) CHECK_MESSAGE(e.path().extension() == ".rkv", e.path());
}
