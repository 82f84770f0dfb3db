// Scratch files, input parts, model paths and the error rule shared by the fuzz targets.
#include "fuzz/fuzz-common.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace ragkv::fuzz {

namespace fs = std::filesystem;

namespace {

// Memory-backed when possible: on a disk file system, truncating and rewriting a file thousands of
// times a second makes ext4 flush it on every close (auto_da_alloc), five times slower here.
fs::path scratch_parent() {
  if (const char* d = std::getenv("RAGKV_FUZZ_TMPDIR"); d && *d) return d;
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return fs::temp_directory_path();
}

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string templ = (scratch_parent() / fmt::format("ragkv-fuzz-{}-XXXXXX", ::getpid())).string();
    if (::mkdtemp(templ.data()) == nullptr) {
      std::fprintf(stderr, "fuzz: mkdtemp %s: %s\n", templ.c_str(), std::strerror(errno));
      std::abort();
    }
    path = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

const fs::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

fs::path write_scratch(const std::string& name, std::string_view bytes) {
  const fs::path p = scratch_dir() / name;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", p.c_str());
    std::abort();
  }
  return p;
}

std::vector<std::string_view> split_parts(std::string_view data, size_t n) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    const size_t at = data.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(data.substr(0, at));
    data.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(data);
  parts.resize(n);
  return parts;
}

std::string join_parts(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += kPartSeparator;
    out += parts[i];
  }
  return out;
}

fs::path model_file(const std::string& name) {
  const char* env = std::getenv("RAGKV_MODELS_DIR");
  const fs::path p = (env && *env ? fs::path(env) : fs::path(RAGKV_SOURCE_DIR) / "models") / name;
  if (!fs::exists(p)) {
    std::fprintf(stderr, "fuzz: %s is missing (run `make setup`, or set RAGKV_MODELS_DIR)\n", p.c_str());
    std::abort();
  }
  return p;
}

void check_impl(bool ok, const char* cond, const char* file, int line, const std::string& message) {
  if (ok) return;
  std::fprintf(stderr, "fuzz check failed at %s:%d: %s\n  %s\n", file, line, cond, message.c_str());
  std::abort();
}

bool expect_ok_or_error(const std::string& names, const std::function<void()>& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    const std::string what = e.what();
    check_impl(names.empty() || what.find(names) != std::string::npos, "the error names the file", __FILE__, __LINE__,
               fmt::format("error without '{}': {}", names, what));
    return false;
  }
}

}  // namespace ragkv::fuzz
