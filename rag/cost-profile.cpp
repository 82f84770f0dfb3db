// Measuring T(α, β) on a grid, and the profile file (model fingerprint, backend, grid).
#include "rag/cost-profile.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/file-io.h"

namespace ragkv {

PrefillCostModel profile_prefill_cost(const Model& model, const std::vector<double>& alphas,
                                      const std::vector<double>& betas, int repetitions) {
  const int64_t max_alpha = int64_t(*std::max_element(alphas.begin(), alphas.end()));
  const int64_t max_beta = int64_t(*std::max_element(betas.begin(), betas.end()));
  std::vector<int32_t> ids(size_t(max_alpha + max_beta));
  const int32_t vocab = int32_t(std::min<int64_t>(model.config().n_vocab, 30000));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(100 + (i * 7919) % size_t(std::max(1, vocab - 100)));
  Workspace ws;
  std::vector<std::vector<double>> ms(alphas.size(), std::vector<double>(betas.size(), 0.0));
  for (size_t i = 0; i < alphas.size(); ++i) {
    const int64_t a = int64_t(alphas[i]);
    KvCache kv = model.new_kv_cache(a + max_beta);
    if (a > 0) model.forward(std::span<const int32_t>(ids.data(), size_t(a)), kv, ws);
    for (size_t j = 0; j < betas.size(); ++j) {
      const int64_t b = int64_t(betas[j]);
      double best = 0;
      for (int r = 0; r < std::max(1, repetitions); ++r) {
        kv.n_used = a;
        const auto t0 = std::chrono::steady_clock::now();
        model.forward(std::span<const int32_t>(ids.data() + a, size_t(b)), kv, ws);
        model.backend().synchronize();
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        best = r == 0 ? t : std::min(best, t);
      }
      ms[i][j] = best;
    }
  }
  PrefillCostModel c;
  c.set_grid(alphas, betas, std::move(ms));
  return c;
}

PrefillCostModel load_or_profile_prefill_cost(const std::filesystem::path& path, const Model& model,
                                              const std::string& model_fingerprint, bool* measured,
                                              const ProfileGrid& grid) {
  const std::string backend = model.backend().name();
  if (measured) *measured = false;
  if (std::filesystem::exists(path)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not a prefill cost profile: {}", path.string(), e.what());
    }
    if (j.value("model", "") == model_fingerprint && j.value("backend", "") == backend) {
      try {
        return PrefillCostModel::from_json(j.at("profile"));
      } catch (const Error& e) {
        fail("{}: {}", path.string(), e.what());
      } catch (const nlohmann::json::exception& e) {
        fail("{}: not a prefill cost profile: {}", path.string(), e.what());
      }
    }
  }
  const double max_beta = *std::max_element(grid.betas.begin(), grid.betas.end());
  const double n_ctx = double(model.config().n_ctx_train);
  for (double a : grid.alphas)
    if (a + max_beta > n_ctx) fail("prefill cost profile: {} cached + {} computed tokens exceed the model's context of {}", a, max_beta, n_ctx);
  PrefillCostModel c = profile_prefill_cost(model, grid.alphas, grid.betas, grid.repetitions);
  const nlohmann::json out = {{"model", model_fingerprint}, {"backend", backend}, {"profile", c.to_json()}};
  write_file_atomic(path, {out.dump(2), "\n"});
  if (measured) *measured = true;
  return c;
}

}  // namespace ragkv
