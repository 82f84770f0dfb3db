// Where ragkv finds its default files (the models `make setup` fetched).
#pragma once
#include <string>

namespace ragkv {

// Directory holding the default models: $RAGKV_MODELS if set, else ./models if it exists, else
// models/ beside the build directory of the running executable.
std::string models_dir();
// Default LLM (SmolLM2-135M-Instruct Q4_1) and the second LLM (Gemma 3 270M Q4_K_M).
std::string default_llm_path();
std::string gemma_llm_path();
// Default sentence embedder directory (all-MiniLM-L6-v2, safetensors + vocab).
std::string default_embedder_dir();

}  // namespace ragkv
