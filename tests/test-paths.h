// Paths the tests share: the source tree (for testdata/ and models/) and the built binary.
#pragma once
#include <filesystem>
#include <string>

namespace ragkv::test {

inline std::filesystem::path source_dir() { return RAGKV_SOURCE_DIR; }
inline std::filesystem::path testdata(const std::string& name) { return source_dir() / "testdata" / name; }
inline std::filesystem::path model_path(const std::string& name) { return source_dir() / "models" / name; }
inline std::string smollm_path() { return model_path("SmolLM2-135M-Instruct.Q4_1.gguf").string(); }
inline std::string gemma_path() { return model_path("gemma-3-270m-q4_k_m.gguf").string(); }
inline std::string ragkv_binary() { return RAGKV_BINARY; }

}  // namespace ragkv::test
