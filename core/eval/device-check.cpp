// `ragkv device-check`: a device backend against the CPU on default-shaped models
// (core/eval/device-check.h).
#include "core/eval/device-check.h"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>
#include <utility>

#include "core/util/error.h"

namespace ragkv {

namespace {

RandomModelSpec smollm2_shape(GgmlType weight_type) {  // SmolLM2-135M
  RandomModelSpec s;
  s.arch = "llama";
  s.n_layer = 30, s.n_embd = 576, s.n_head = 9, s.n_head_kv = 3, s.n_ff = 1536;
  s.n_vocab = 49152;
  s.n_ctx = 2048;
  s.weight_type = weight_type;
  return s;
}

RandomModelSpec gemma3_shape(GgmlType weight_type) {  // Gemma 3 270M (vocabulary cut from 262,144)
  RandomModelSpec s;
  s.arch = "gemma3";
  s.n_layer = 18, s.n_embd = 640, s.n_head = 4, s.n_head_kv = 1, s.head_dim = 256, s.n_ff = 2048;
  s.sliding_window = 128;  // shorter than a prompt, so the windowed layers mask
  s.n_vocab = 32768;
  s.n_ctx = 2048;
  s.weight_type = weight_type;
  return s;
}

RandomModelSpec llama1b_q4km_shape() {  // Llama 3.2 1B (vocabulary cut from 128,256)
  RandomModelSpec s;
  s.arch = "llama";
  s.n_layer = 16, s.n_embd = 2048, s.n_head = 32, s.n_head_kv = 8, s.n_ff = 8192;
  s.n_vocab = 32768;
  s.n_ctx = 2048;
  s.q4_k_m = true;
  return s;
}

}  // namespace

std::vector<DeviceCheckModel> default_device_check_models() {
  return {{"smollm2-135m-shape/f16", smollm2_shape(GgmlType::F16), ""},
          {"smollm2-135m-shape/q4_1", smollm2_shape(GgmlType::Q4_1), ""},
          {"gemma3-270m-shape/f16", gemma3_shape(GgmlType::F16), ""},
          {"gemma3-270m-shape/q8_0", gemma3_shape(GgmlType::Q8_0), ""},
          {"llama3.2-1b-shape/q4_k_m", llama1b_q4km_shape(), ""}};
}

DeviceCheckResult run_device_check(Backend& reference, Backend& candidate, const std::vector<DeviceCheckModel>& models,
                                   const std::filesystem::path& work_dir, const AgreementOptions& opt,
                                   const AgreementBar& bar, const std::function<void(const std::string&)>& log) {
  DeviceCheckResult result;
  result.passed = !models.empty();
  result.report = {{"reference", reference.kernels()},
                   {"candidate", candidate.kernels()},
                   {"options",
                    {{"prompts", opt.prompts},
                     {"prompt_tokens", opt.prompt_tokens},
                     {"steps", opt.steps},
                     {"seed", opt.seed}}},
                   {"bar", bar.to_json()},
                   {"models", nlohmann::json::array()}};
  for (size_t i = 0; i < models.size(); ++i) {
    const DeviceCheckModel& m = models[i];
    std::string path = m.path;
    if (path.empty()) {
      path = (work_dir / fmt::format("device-check-{}.gguf", i)).string();
      log(fmt::format("{}: writing the random model", m.name));
      RandomModelSpec spec = m.spec;
      spec.threads = std::max(1, reference.threads());  // the weights do not depend on it
      write_random_model(spec, path);
    }
    AgreementFigures f;
    {
      const Model on_reference(path, reference), on_candidate(path, candidate);
      log(fmt::format("{}: {} prompts of {} tokens, {} steps each", m.name, opt.prompts, opt.prompt_tokens, opt.steps));
      f = teacher_forced_agreement(on_reference, on_candidate, opt);
    }
    if (m.path.empty()) {
      std::error_code ec;
      std::filesystem::remove(path, ec);  // best effort: work_dir is the caller's temporary
    }
    const bool ok = bar.met_by(f);
    result.passed = result.passed && ok;
    log(fmt::format("{}: top-1 equal on {} of {} steps ({:.4f}), first-token KL mean {:.3g} (max {:.3g}), "
                    "step KL max {:.3g}, prefill logits rel. L2 max {:.3g}: {}",
                    m.name, f.top1_equal, f.steps, f.top1_rate(), f.first_token_kl_mean, f.first_token_kl_max,
                    f.step_kl_max, f.prefill_logits_rel_l2_max, ok ? "pass" : "FAIL"));
    nlohmann::json entry = {{"name", m.name}, {"figures", f.to_json()}, {"passed", ok}};
    if (!m.path.empty()) entry["path"] = m.path;
    result.report["models"].push_back(std::move(entry));
  }
  result.report["passed"] = result.passed;
  return result;
}

}  // namespace ragkv
