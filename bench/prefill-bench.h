// `ragkv bench prefill`: prefill and decode throughput of one model, as JSON-ready numbers.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace ragkv {

struct PrefillBenchOptions {
  std::string model_path;
  int threads = 0;  // the backend's CPU threads, for the report
  int prompt_tokens = 512;
  int decode_tokens = 32;
  int repetitions = 3;
  int decode_batch = 4;  // sequences decoded together for decode_batch_tokens_per_s (1: none)
};

class Backend;
struct ModelConfig;

// Floating-point operations (multiply and add counted apart) of one dense causal prefill of
// `tokens` tokens: every projection of every layer (Q, K, V, O, gate, up, down) on every token,
// Q·Kᵀ and P·V over the key/query pairs each layer lets attend (causal, inside the sliding window
// on local layers), and the output head on the last token. Norms, RoPE, softmax and activations
// are left out (under 1 % at these sizes). For TFLOP/s against a chip's peak.
double prefill_flops(const ModelConfig& c, int64_t tokens);

// Runs a warm-up, then `repetitions` timed prefills of a prompt_tokens-long real-text prompt
// and as many greedy decodes of decode_tokens after it; reports the best and median prefill rates
// and the median decode rate (with the bytes a decode step reads: decode_weight_bytes, and
// kv_bytes_per_position per cached position), then decode_batch
// sequences decoded together (tokens/s summed over them), and the peak RSS (VmHWM) of the
// model's run: of load, prefills and the single-sequence decodes, and with the batch as well.
nlohmann::json bench_prefill(Backend& backend, const PrefillBenchOptions& opt);

}  // namespace ragkv
