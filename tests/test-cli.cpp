// The ragkv executable end to end: generate/tokenize on the default model, and bad input
// answered with one line on stderr and a non-zero exit, never a crash.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test-paths.h"

namespace fs = std::filesystem;

namespace {

struct Run {
  int exit_code = -1;
  std::string out, err;
};

Run run(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / "ragkv-tests";
  fs::create_directories(dir);
  const std::string err_file = (dir / "stderr.txt").string();
  const std::string cmd = ragkv::test::ragkv_binary() + " " + args + " 2>" + err_file;
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("cli: generate answers a chat prompt on the default model") {
  const Run r = run("generate --device cpu --chat --max-tokens 12 --json --prompt 'What is the capital of France?'");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("Paris") != std::string::npos);
}

TEST_CASE("cli: tokenize prints ids on one line") {
  const Run r = run("tokenize --text 'Hello world'");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "19556 905\n");
}

TEST_CASE("cli: bad input gives a one-line error and a non-zero exit") {
  const fs::path dir = fs::temp_directory_path() / "ragkv-tests";
  const std::string trunc = (dir / "cli-truncated.gguf").string();
  {
    std::vector<char> head(1 << 20);
    std::ifstream(ragkv::test::smollm_path(), std::ios::binary).read(head.data(), std::streamsize(head.size()));
    std::ofstream(trunc, std::ios::binary).write(head.data(), std::streamsize(head.size()));
  }
  const std::string tiny = (dir / "cli-tiny.gguf").string();
  REQUIRE(run("make-test-model --arch llama --layers 1 --embd 32 --heads 2 --kv-heads 1 --ff 64 --context 32 --out " + tiny).exit_code == 0);

  struct Case { std::string args, expect; int code; };
  const std::vector<Case> cases = {
      {"generate --device cpu --model /nonexistent.gguf --prompt hi", "cannot open model file", 1},
      {"generate --device cpu --model " + trunc + " --prompt hi", "truncated", 1},
      {"generate --device cpu --model " + ragkv::test::testdata("quant_golden.bin").string() + " --prompt hi", "not a GGUF file", 1},
      {"generate --device cpu --model " + tiny + " --max-tokens 4 --prompt '" + std::string(40, 'a') + "'",
       "exceeds the model's context of 32 tokens", 1},
      {"generate --prompt", "", 2},
      {"frobnicate", "", 2},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const Run r = run(c.args);
    CAPTURE(r.err);
    CHECK(r.exit_code == c.code);
    if (c.code == 1) {
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.rfind("ragkv: error: ", 0) == 0);
      CHECK(r.err.find(c.expect) != std::string::npos);
    }
  }
}
