// Small helpers the tests share: the message of the Error a call throws, the default model's
// tokenizer, running the ragkv binary with its stdout, stderr and exit code captured, JSONL
// records, and the rag-mini pipeline on a tiny random model.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/format/gguf.h"
#include "core/kv/chunk-kv-file.h"
#include "core/model/tokenizer.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"

namespace ragkv::test {

// Random f16 bits per layer of m's shape: k[l], v[l] are [n_tokens][kv_dim]; kp, vp point at them
// as write_chunk_kv and KvStore::put take them.
struct RandomKv {
  std::vector<std::vector<uint16_t>> k, v;
  std::vector<const uint16_t*> kp, vp;
  RandomKv(const ChunkKvMeta& m, uint32_t seed) {
    std::mt19937 rng(seed);
    const size_t n = size_t(m.n_tokens) * m.kv_dim();
    for (uint32_t l = 0; l < m.n_layer; ++l) {
      k.emplace_back(n);
      v.emplace_back(n);
      for (size_t i = 0; i < n; ++i) k[l][i] = uint16_t(rng()), v[l][i] = uint16_t(rng());
    }
    for (uint32_t l = 0; l < m.n_layer; ++l) kp.push_back(k[l].data()), vp.push_back(v[l].data());
  }
};

// What f throws as a ragkv::Error, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ragkv::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The default LLM's tokenizer, loaded once per test process.
inline const ragkv::Tokenizer& smollm_tokenizer() {
  static std::unique_ptr<ragkv::GgufFile> gguf;
  static std::unique_ptr<ragkv::Tokenizer> tok;
  if (!tok) {
    INFO("model file: " << smollm_path() << " (fetched by `make setup`)");
    REQUIRE(std::filesystem::exists(smollm_path()));
    gguf = std::make_unique<ragkv::GgufFile>(smollm_path());
    tok = ragkv::Tokenizer::from_gguf(*gguf);
  }
  return *tok;
}

// An environment variable set for the scope (so for the ragkv processes run_ragkv starts), then
// restored.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

struct Run {
  int exit_code = -1;
  std::string out, err;
};

// Shell text that runs the ragkv binary inside dir, as the shell's own process (exec, so a signal
// to the shell's pid reaches ragkv): the working directory is dir (so a relative path never lands
// in the source tree, ctest's working directory) and TMPDIR points there; the default models are
// still the source tree's (RAGKV_MODELS, unless already set). Append the arguments.
inline std::string ragkv_in(const std::filesystem::path& dir) {
  return fmt::format("cd '{0}' && export TMPDIR='{0}' RAGKV_MODELS=\"${{RAGKV_MODELS:-{1}}}\" && exec {2}", dir.string(),
                     (source_dir() / "models").string(), ragkv_binary());
}

// Runs `ragkv ARGS` through the shell (ARGS is shell text) in a TempDir of its own (ragkv_in);
// stderr goes through a file there.
inline Run run_ragkv(const std::string& args) {
  const TempDir scratch("run");
  const std::filesystem::path err_file = scratch.path / "stderr.txt";
  const std::string cmd = ragkv_in(scratch.path) + " " + args + " 2>'" + err_file.string() + "'";
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

// A path quoted for the shell (built with += : GCC 12 warns falsely on "'" + std::string&&).
inline std::string shell_quote(const std::filesystem::path& p) {
  std::string s(1, '\'');
  s += p.string();
  s += '\'';
  return s;
}

// The records of a JSONL file (blank lines skipped).
inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream f(p);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A store's cache files (kv/*.rkv) by name, with their bytes; empty when it has no kv/ yet.
inline std::map<std::string, std::string> store_files(const std::filesystem::path& store) {
  std::map<std::string, std::string> out;
  if (std::filesystem::exists(store / "kv"))
    for (const auto& e : std::filesystem::directory_iterator(store / "kv"))
      if (e.path().extension() == ".rkv") out[e.path().filename().string()] = read_file(e.path());
  return out;
}

// The rag-mini pipeline on a tiny random model, through the binary, in dir: make-test-model
// (context n_ctx), build-index of testdata/rag-mini, precompute with `neighbours` variants.
struct TinyPipeline {
  std::filesystem::path model, index, store;
  std::string on_model;    // " --model 'MODEL' --threads 1"
  std::string precompute;  // precompute's stdout: its JSON summary
};
inline TinyPipeline make_tiny_pipeline(const std::filesystem::path& dir, int neighbours, int n_ctx = 4096) {
  TinyPipeline t{dir / "tiny.gguf", dir / "index", dir / "store", "", ""};
  Run r = run_ragkv(fmt::format("make-test-model --arch llama --layers 2 --embd 64 --heads 2 --kv-heads 1 --ff 128 "
                                "--context {} --out {}", n_ctx, shell_quote(t.model)));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  t.on_model = " --model " + shell_quote(t.model) + " --threads 1";
  r = run_ragkv("build-index --corpus " + shell_quote(testdata("rag-mini.corpus.jsonl")) + " --chunk-tokens 256 --out " +
                shell_quote(t.index) + " --model " + shell_quote(t.model));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_ragkv(fmt::format("precompute --index {} --store {} --neighbours {}{}", shell_quote(t.index),
                            shell_quote(t.store), neighbours, t.on_model));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  t.precompute = r.out;
  return t;
}

}  // namespace ragkv::test
