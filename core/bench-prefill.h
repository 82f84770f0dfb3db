// `ragkv bench prefill`: prefill and decode throughput of one model, as JSON-ready numbers.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ragkv {

struct PrefillBenchOptions {
  std::string model_path;
  std::string device = "cpu";
  int threads = 0;
  int prompt_tokens = 512;
  int decode_tokens = 32;
  int repetitions = 3;
};

// Runs a warm-up, then `repetitions` timed prefills of a prompt_tokens-long real-text prompt
// and one greedy decode of decode_tokens; reports the best and median rates.
nlohmann::json bench_prefill(const PrefillBenchOptions& opt);

}  // namespace ragkv
