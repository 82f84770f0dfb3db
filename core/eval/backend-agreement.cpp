// Teacher-forced agreement of one model on two backends (core/eval/backend-agreement.h).
#include "core/eval/backend-agreement.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/eval/metrics.h"
#include "core/model/generate.h"
#include "core/util/error.h"

namespace ragkv {

namespace {

double relative_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace

nlohmann::json AgreementFigures::to_json() const {
  return {{"steps", steps},
          {"top1_equal", top1_equal},
          {"top1_rate", top1_rate()},
          {"first_token_kl_mean", first_token_kl_mean},
          {"first_token_kl_max", first_token_kl_max},
          {"step_kl_mean", step_kl_mean},
          {"step_kl_max", step_kl_max},
          {"prefill_logits_rel_l2_max", prefill_logits_rel_l2_max}};
}

nlohmann::json AgreementBar::to_json() const {
  return {{"min_top1_rate", min_top1_rate},
          {"max_first_token_kl_mean", max_first_token_kl},
          {"max_prefill_logits_rel_l2", max_prefill_rel_l2}};
}

AgreementFigures teacher_forced_agreement(const Model& reference, const Model& candidate, const AgreementOptions& opt,
                                          const std::function<void(int)>& on_prompt) {
  const ModelConfig& rc = reference.config();
  if (rc.n_vocab != candidate.config().n_vocab)
    fail("backend agreement: the two models' vocabularies differ ({} and {} tokens)", rc.n_vocab,
         candidate.config().n_vocab);
  if (opt.prompts < 1 || opt.prompt_tokens < 1 || opt.steps < 1)
    fail("backend agreement: prompts, prompt tokens and steps must each be at least 1");
  const int64_t n_ctx = int64_t(opt.prompt_tokens) + opt.steps;
  if (rc.n_ctx_train > 0 && n_ctx > rc.n_ctx_train)
    fail("backend agreement: {} prompt tokens + {} steps exceed the model's context of {}", opt.prompt_tokens,
         opt.steps, rc.n_ctx_train);

  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int32_t> token(0, rc.n_vocab - 1);
  AgreementFigures f;
  double first_kl_sum = 0, step_kl_sum = 0;
  for (int p = 0; p < opt.prompts; ++p) {
    std::vector<int32_t> prompt(size_t(opt.prompt_tokens));
    for (auto& t : prompt) t = token(rng);
    KvCache kv_ref = reference.new_kv_cache(n_ctx), kv_cand = candidate.new_kv_cache(n_ctx);
    Workspace ws_ref, ws_cand;
    std::vector<float> l_ref = reference.forward(prompt, kv_ref, ws_ref);
    std::vector<float> l_cand = candidate.forward(prompt, kv_cand, ws_cand);
    f.prefill_logits_rel_l2_max = std::max(f.prefill_logits_rel_l2_max, relative_l2(l_cand, l_ref));
    for (int s = 0; s < opt.steps; ++s) {
      const double kl = kl_divergence_logits(l_ref, l_cand);
      if (s == 0) {
        first_kl_sum += kl;
        f.first_token_kl_max = std::max(f.first_token_kl_max, kl);
      }
      step_kl_sum += kl;
      f.step_kl_max = std::max(f.step_kl_max, kl);
      const int32_t next = argmax(l_ref);
      f.top1_equal += argmax(l_cand) == next;
      ++f.steps;
      if (s + 1 == opt.steps) break;
      // Both fed the reference's token (teacher forcing), as decoding runs it: Model::decode_step
      // (8-bit activation blocks on quantised weights; on the CUDA backend the step graphs).
      KvCache* const ref_seq[1] = {&kv_ref};
      KvCache* const cand_seq[1] = {&kv_cand};
      l_ref = reference.decode_step(std::span(&next, 1), ref_seq, ws_ref);
      l_cand = candidate.decode_step(std::span(&next, 1), cand_seq, ws_cand);
    }
    if (on_prompt) on_prompt(p);
  }
  f.first_token_kl_mean = first_kl_sum / opt.prompts;
  f.step_kl_mean = step_kl_sum / double(f.steps);
  return f;
}

}  // namespace ragkv
