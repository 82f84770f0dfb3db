// Prefill/decode benchmark. The prompt is real English text (bench/bench-text.h, repeated and cut
// to length) so the token mix is realistic; only timing is measured, the output is not checked here.
#include "bench/prefill-bench.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "bench/bench-text.h"
#include "bench/stats.h"
#include "core/util/error.h"
#include "core/model/generate.h"
#include "core/model/model.h"
#include "core/format/gguf.h"
#include "core/model/model-config.h"

namespace ragkv {

namespace {

// The kernel's count of this process's peak resident memory (VmHWM) restarts from the current
// RSS (Linux: "5" to /proc/self/clear_refs), so each model's run reports its own peak.
void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

// VmHWM in MiB (0 where /proc is not there).
double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

}  // namespace

double prefill_flops(const ModelConfig& c, int64_t tokens) {
  const double t = double(tokens), d = c.n_embd, hd = c.head_dim;
  const double q_dim = double(c.n_head) * hd, kv_dim = double(c.n_head_kv) * hd;
  const double weights_per_token = d * q_dim + 2 * d * kv_dim + q_dim * d + 3 * d * double(c.n_ff);
  double pairs_all = 0;  // Σ over layers of the (query, key) pairs attended
  for (int l = 0; l < c.n_layer; ++l) {
    const bool local = c.sliding_window > 0 && size_t(l) < c.layer_is_local.size() && c.layer_is_local[size_t(l)];
    const double w = local ? std::min(t, double(c.sliding_window)) : t;
    // Query i sees min(i + 1, w) keys: Σ_i = w(w + 1)/2 + (t − w)·w.
    pairs_all += w * (w + 1) / 2 + (t - w) * w;
  }
  return 2 * weights_per_token * t * c.n_layer + 2 * 2 * hd * double(c.n_head) * pairs_all + 2 * d * double(c.n_vocab);
}

namespace {

// Bytes of the model file a decode step reads: every tensor but token_embd, of which a step reads
// one row (the whole table when it is also the output head, with no output.weight). What a
// decode rate is set against for "% of memory bandwidth" (scripts/gpu-report.py).
double decode_weight_bytes(const GgufFile& gguf) {
  bool separate_head = false;
  for (const auto& t : gguf.tensors()) separate_head = separate_head || t.name == "output.weight";
  double bytes = 0;
  for (const auto& t : gguf.tensors())
    if (t.name != "token_embd.weight" || !separate_head) bytes += double(t.nbytes);
  return bytes;
}

}  // namespace

nlohmann::json bench_prefill(Backend& backend, const PrefillBenchOptions& opt) {
  using clock = std::chrono::steady_clock;
  reset_peak_rss();
  const auto t_load = clock::now();
  Model model(opt.model_path, backend);
  const double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t_load).count();

  std::vector<int32_t> ids = tokenize_prompt(model.tokenizer(), "");
  const std::vector<int32_t> text = model.tokenizer().encode(kBenchPassages[0], false);
  while (int(ids.size()) < opt.prompt_tokens) ids.insert(ids.end(), text.begin(), text.end());
  ids.resize(opt.prompt_tokens);

  const int64_t n_ctx = opt.prompt_tokens + opt.decode_tokens + 1;
  KvCache kv = model.new_kv_cache(n_ctx);
  Workspace ws;
  std::vector<double> prefill_ms;
  backend.set_profile_section("prefill");
  for (int rep = 0; rep <= opt.repetitions; ++rep) {  // rep 0 is the warm-up
    kv.n_used = 0;
    const auto t0 = clock::now();
    model.forward(ids, kv, ws);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (rep > 0) prefill_ms.push_back(ms);
  }
  const double best = *std::min_element(prefill_ms.begin(), prefill_ms.end()), median = median_of(prefill_ms);

  GenerateOptions g;
  g.max_tokens = opt.decode_tokens + 1;
  g.stop_at_eog = false;
  // As many greedy decodes as timed prefills; one 32-token decode is a third of a second, and a
  // shared machine's noise moved single runs by ±15 %: the median is quoted.
  std::vector<double> decode_tps_runs;
  backend.set_profile_section("generate (prefill, then decode one sequence)");
  for (int rep = 0; rep < opt.repetitions; ++rep) {
    const GenerateResult r = generate_text(model, ids, g);
    decode_tps_runs.push_back(opt.decode_tokens / (r.decode_ms / 1000.0));
  }
  const double decode_tps = median_of(decode_tps_runs);
  const double peak_single = peak_rss_mib();

  // decode_batch sequences decoded together (DecodeBatch: one decode step for all of them), each
  // after its own prefill of a prompt of up to 128 tokens (lengths differ by one).
  double batch_tps = 0;
  if (opt.decode_batch > 1) {
    const int64_t len = std::min<int64_t>(opt.prompt_tokens, 128);
    backend.set_profile_section("decode batch");
    DecodeBatch batch(model);
    for (int s = 0; s < opt.decode_batch; ++s) {
      const int64_t n = std::max<int64_t>(1, len - s);
      KvCache kvb = model.new_kv_cache(n + opt.decode_tokens + 1);
      Workspace wsb;
      const std::vector<float> logits = model.forward(std::span(ids).first(size_t(n)), kvb, wsb);
      batch.add(std::move(kvb), logits, g);
    }
    const auto t0 = clock::now();
    while (batch.active() > 0) batch.step();
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    batch_tps = double(opt.decode_batch) * opt.decode_tokens / (ms / 1000.0);
  }

  return {
      {"model", opt.model_path},
      {"arch", model.config().arch_name},
      {"device", backend.name()},
      {"kernels", backend.kernels()},
      {"step_graphs", backend.step_summary()},
      {"threads", opt.threads},
      {"load_ms", load_ms},
      {"prompt_tokens", opt.prompt_tokens},
      {"prefill_ms_best", best},
      {"prefill_ms_median", median},
      {"prefill_tokens_per_s", opt.prompt_tokens / (best / 1000.0)},
      {"prefill_tflops", prefill_flops(model.config(), opt.prompt_tokens) / (best / 1000.0) / 1e12},
      {"prefill_tokens_per_s_median", opt.prompt_tokens / (median / 1000.0)},
      {"decode_tokens", opt.decode_tokens},
      {"decode_tokens_per_s", decode_tps},
      {"decode_weight_bytes", decode_weight_bytes(model.gguf())},
      // f16 K and V of every layer per cached position (a step after p positions reads p of them).
      {"kv_bytes_per_position", 2.0 * 2.0 * double(model.config().kv_dim()) * model.config().n_layer},
      {"decode_batch", opt.decode_batch},
      {"decode_batch_tokens_per_s", batch_tps},
      {"peak_rss_mib", peak_single},
      {"peak_rss_mib_with_batch", peak_rss_mib()},
  };
}

}  // namespace ragkv
