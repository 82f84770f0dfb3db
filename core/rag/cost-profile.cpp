// Measuring T(α, β) on a grid, and the profile file (model fingerprint, backend, grid).
#include "core/rag/cost-profile.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/file-io.h"

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

namespace {

// The parts of the profile in `path` measured for this model on this backend; none when the file
// is missing or another's. Error naming the file when it cannot be read.
struct ProfileParts {
  std::optional<PrefillCostModel> prefill;
  std::optional<TierReadRates> tiers;
};
ProfileParts read_profile(const std::filesystem::path& path, const std::string& model_fingerprint,
                          const std::string& backend) {
  ProfileParts parts;
  if (path.empty() || !std::filesystem::exists(path)) return parts;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a prefill cost profile: {}", path.string(), e.what());
  }
  if (!j.is_object()) fail("{}: not a prefill cost profile: not a JSON object", path.string());
  if (j.value("model", "") != model_fingerprint || j.value("backend", "") != backend) return parts;
  try {
    if (j.contains("profile")) parts.prefill = PrefillCostModel::from_json(j.at("profile"));
    if (j.contains("tiers")) parts.tiers = TierReadRates::from_json(j.at("tiers"));
  } catch (const Error& e) {
    fail("{}: {}", path.string(), e.what());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a prefill cost profile: {}", path.string(), e.what());
  }
  return parts;
}

void write_profile(const std::filesystem::path& path, const std::string& model_fingerprint, const std::string& backend,
                   const PrefillCostModel& prefill, const std::optional<TierReadRates>& tiers) {
  nlohmann::json out = {{"model", model_fingerprint}, {"backend", backend}, {"profile", prefill.to_json()}};
  if (tiers) out["tiers"] = tiers->to_json();
  write_file_atomic(path, {out.dump(2), "\n"});
}

PrefillCostModel measure_prefill(const Model& model, const ProfileGrid& grid) {
  const double max_beta = *std::max_element(grid.betas.begin(), grid.betas.end());
  const double n_ctx = double(model.config().n_ctx_train);
  for (double a : grid.alphas)
    if (a + max_beta > n_ctx) fail("prefill cost profile: {} cached + {} computed tokens exceed the model's context of {}", a, max_beta, n_ctx);
  return profile_prefill_cost(model, grid.alphas, grid.betas, grid.repetitions);
}

}  // namespace

PrefillCostModel load_or_profile_prefill_cost(const std::filesystem::path& path, const Model& model,
                                              const std::string& model_fingerprint, bool* measured,
                                              const ProfileGrid& grid) {
  const std::string backend = model.backend().name();
  if (measured) *measured = false;
  ProfileParts parts = read_profile(path, model_fingerprint, backend);
  if (parts.prefill) return *parts.prefill;
  PrefillCostModel c = measure_prefill(model, grid);
  write_profile(path, model_fingerprint, backend, c, parts.tiers);
  if (measured) *measured = true;
  return c;
}

MachineProfile load_or_profile_machine(const std::filesystem::path& path, const Model& model,
                                       const std::string& model_fingerprint, const KvStore* store,
                                       const ProfileGrid& grid) {
  const std::string backend = model.backend().name();
  ProfileParts parts = read_profile(path, model_fingerprint, backend);
  const bool needs_disk = store && !store->foreign() && store->usage().first > 0;
  if (parts.tiers && needs_disk && (!parts.tiers->has_disk() || parts.tiers->kv_dtype != store->info().dtype))
    parts.tiers.reset();  // measured without this store's kind of files
  MachineProfile m;
  m.measured_prefill = !parts.prefill;
  m.measured_tiers = !parts.tiers;
  m.prefill = parts.prefill ? *parts.prefill : measure_prefill(model, grid);
  m.tiers = parts.tiers ? *parts.tiers : measure_tier_read_rates(model.backend(), needs_disk ? store : nullptr);
  if (!path.empty() && (m.measured_prefill || m.measured_tiers))
    write_profile(path, model_fingerprint, backend, m.prefill, m.tiers);
  return m;
}

}  // namespace ragkv
