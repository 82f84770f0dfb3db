// eval records: written per query as `ragkv eval` goes, read back by --resume.
#include "core/eval/records.h"

#include <filesystem>

#include "core/util/file-io.h"
#include "core/util/error.h"
#include "core/eval/baseline-cache.h"
#include "core/eval/metrics.h"
#include "core/util/json-files.h"

namespace ragkv {

using nlohmann::json;

json EvalSettings::to_json() const {
  json j = {{"model", model_fingerprint}, {"baseline", baseline},         {"modes", modes},
            {"recompute_ratio", recompute_ratio}, {"check_layers", check_layers}, {"max_tokens", max_tokens},
            {"top_k", top_k}};
  if (selection != "kv") j["selection"] = selection;
  if (sink_tokens != 0) j["sink_tokens"] = sink_tokens;
  if (!check_at.empty()) j["check_at"] = check_at;
  if (adaptive != 0) j["adaptive"] = adaptive;
  if (with_craft) {
    j["alpha"] = alpha;
    j["focus_window"] = focus_window;
  }
  return j;
}

json engine_identity(const std::string& model_fingerprint, const std::string& device, const std::string& kernels,
                     int threads, const std::string& kv) {
  return {{"binary", engine_fingerprint()}, {"model", model_fingerprint}, {"device", device}, {"kernels", kernels},
          {"threads", threads}, {"kv", kv}};
}

json eval_record(const std::string& id, const std::vector<std::string>& golds,
                 const std::vector<std::string>& chunk_ids, const std::map<std::string, AnswerRecord>& by_mode,
                 const EvalSettings& settings) {
  const AnswerRecord& base = by_mode.at(settings.baseline);
  json rec = {{"id", id}, {"answers", golds}, {"chunks", chunk_ids}, {"settings", settings.to_json()}};
  if (!settings.engine.is_null()) rec["engine"] = settings.engine;
  for (const auto& m : settings.modes) {
    const AnswerRecord& r = by_mode.at(m);
    rec["modes"][m] = {{"answer", r.answer},
                       {"output_ids", r.output_ids},
                       {"metrics", r.metrics()},
                       {"kl_first_token_vs_baseline", kl_divergence_logits(base.first_logits, r.first_logits)}};
    if (!r.chunk_ids.empty() && r.chunk_ids != chunk_ids) rec["modes"][m]["chunks"] = r.chunk_ids;  // MODE+freq
  }
  return rec;
}

EvalItem eval_item_of(const json& record, const EvalSettings& settings) {
  EvalItem item;
  item.id = record.at("id").get<std::string>();
  item.golds = record.at("answers").get<std::vector<std::string>>();
  const json& modes = record.at("modes");
  for (const auto& m : settings.modes) {
    if (!modes.contains(m)) fail("no answer in mode {} for query {}", m, item.id);
    const json& j = modes.at(m);
    const json& mt = j.at("metrics");
    EvalAnswer a;
    a.answer = j.at("answer").get<std::string>();
    a.output_ids = j.at("output_ids").get<std::vector<int32_t>>();
    a.kl_first_token = j.at("kl_first_token_vs_baseline").get<double>();
    // Older records name the compute fraction recompute_ratio, and the reused tokens' share real_compute_fraction.
    a.compute_fraction = mt.contains("compute_fraction") ? mt.at("compute_fraction").get<double>()
                                                           : mt.at("recompute_ratio").get<double>();
    a.ttft_ms = mt.at("ttft_ms").get<double>();
    a.prefill_ms = mt.at("prefill_ms").get<double>();
    a.load_ms = mt.at("load_ms").get<double>();
    a.load_hidden_ms = mt.at("load_hidden_ms").get<double>();
    const json real = mt.value("reused_recompute_fraction", mt.value("real_compute_fraction", json()));
    a.reused_recompute = real.is_number() ? real.get<double>() : -1.0;
    a.composed = mt.value("composed", false);
    a.first_margin = mt.value("first_step_margin", -1.0);
    a.fell_back = mt.value("fallback", false);
    a.repair_moved = mt.value("repair_moved_first_token", false);
    if (mt.contains("exact_prefix_tokens") && mt.at("prefill_tokens").get<double>() > 0)
      a.exact_prefix_share = mt.at("exact_prefix_tokens").get<double>() / mt.at("prefill_tokens").get<double>();
    a.cache_bad = mt.at("cache_bad").get<int>();
    a.cache_misses = mt.at("cache_misses").get<int>();
    if (mt.contains("craft")) {
      const json& c = mt.at("craft");
      for (const json& ch : c.at("chunks")) {
        ++a.craft_chunks;
        a.craft_variant_chunks += ch.at("context_chunks").get<int>() > 0;
        a.craft_exact_chunks += ch.at("exact").get<bool>();
        a.craft_cfo_sum += ch.at("cfo").get<double>();
      }
      a.craft_fix_tokens = c.at("fix_tokens").get<int64_t>();
      a.craft_cutoff_layer = c.at("focus_cutoff_layer").get<int>();
    }
    item.by_mode.emplace(m, std::move(a));
  }
  return item;
}

ResumedEval read_eval_records(const std::string& path, const EvalSettings& settings,
                              const std::set<std::string>& query_ids) {
  ResumedEval out;
  const std::string content = read_file(path);
  const json want = settings.to_json();
  out.dropped_partial_line = for_each_resumed_record(path, content, [&](size_t n, std::string_view line, const json& rec) {
    try {
      if (!rec.is_object() || !rec.contains("settings")) fail("not a record of ragkv eval --answers");
      if (rec.at("settings") != want)
        fail("made with other settings ({}) than this run ({}); answer into another file or rerun without --resume",
             rec.at("settings").dump(), want.dump());
      if (!settings.engine.is_null() && rec.value("engine", json()) != settings.engine)
        fail("made by another engine ({}) than this run ({}): answers and timings of two engines would mix; answer "
             "into another file, or resume with the same binary, device, threads and store",
             rec.value("engine", json("unrecorded")).dump(), settings.engine.dump());
      EvalItem item = eval_item_of(rec, settings);
      if (!query_ids.count(item.id)) fail("query {} is not in the queries file", item.id);
      if (!out.ids.insert(item.id).second) fail("query {} appears twice", item.id);
      out.items.push_back(std::move(item));
      out.lines.emplace_back(line);
    } catch (const json::exception& e) {
      fail("{}:{}: not a record of ragkv eval --answers: {}", path, n, e.what());
    } catch (const Error& e) {
      fail("{}:{}: {}", path, n, e.what());
    }
  });
  return out;
}

}  // namespace ragkv
