// Default file locations.
#include "core/util/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace ragkv {

namespace fs = std::filesystem;

std::string models_dir() {
  if (const char* env = std::getenv("RAGKV_MODELS"); env && *env) return env;
  if (fs::is_directory("models")) return "models";
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
      if (fs::is_directory(dir / "models")) return (dir / "models").string();
  }
  return "models";
}

std::string default_llm_path() { return models_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }
std::string gemma_llm_path() { return models_dir() + "/gemma-3-270m-q4_k_m.gguf"; }
std::string default_embedder_dir() { return models_dir() + "/all-MiniLM-L6-v2"; }

}  // namespace ragkv
