// Small helpers the tests share: the message of the Error a call throws, and running the ragkv
// binary with its stdout, stderr and exit code captured.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "core/error.h"
#include "tests/test-paths.h"

namespace ragkv::test {

// What f throws as a ragkv::Error, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ragkv::Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct Run {
  int exit_code = -1;
  std::string out, err;
};

// Runs `ragkv ARGS` through the shell (ARGS is shell text); stderr goes through a file of its own.
inline Run run_ragkv(const std::string& args) {
  static int counter = 0;
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() / fmt::format("ragkv-stderr-{}-{}.txt", ::getpid(), counter++);
  const std::string cmd = ragkv_binary() + " " + args + " 2>" + err_file.string();
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
  std::error_code ec;
  std::filesystem::remove(err_file, ec);
  return r;
}

}  // namespace ragkv::test
