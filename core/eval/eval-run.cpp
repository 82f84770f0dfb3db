// The eval run: modes and settings, resume, the (query, mode) jobs through one AnswerBatch, the
// records in input order, then the summary, gate, report and α fit (core/eval/eval-run.h).
#include "core/eval/eval-run.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/eval/alpha-fit.h"
#include "core/eval/baseline-cache.h"
#include "core/eval/fallback-fit.h"
#include "core/eval/margin-fallback.h"
#include "core/eval/records.h"
#include "core/eval/report.h"
#include "core/eval/tradeoff-plot.h"
#include "core/rag/answer-batch.h"
#include "core/rag/answer-run.h"
#include "core/rag/cache-keys.h"
#include "core/rag/chunk-access-table.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/line-writer.h"
#include "core/util/progress.h"

namespace ragkv {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kReference = "reuse";  // the mode recovery is measured against

class EvalRun {
 public:
  EvalRun(RagEngine& e, const QueryFile& qf, const EvalRunOptions& o);
  EvalRunResult run();

 private:
  // One query while its jobs are in flight.
  struct OpenQuery {
    std::optional<RagContext> ctx;
    std::vector<const Chunk*> freq_chunks;  // CRAFT's frequency order, for the MODE+freq variants
    std::vector<std::string> chunk_ids;
    std::map<std::string, AnswerRecord> by_mode;
    std::optional<BaselineKey> key;
    size_t in_flight = 0;
    bool failed = false;
  };

  void add_spec(const ModeSpec& s);
  void plan_modes();
  void resume();
  void fail_query(size_t qi, const Error& err);
  void emit_ready();
  void open_query(size_t qi);
  bool admit_next();
  void answer_all();
  void write_report(const json& summary) const;
  int fit_alpha(json& summary, const std::vector<GateCheck>& checks);
  bool evaluates_auto() const;
  bool derives_auto_rule() const;
  std::vector<FallbackRule> fallback_rules() const;
  std::vector<std::string> gated_modes(const std::vector<std::string>& derived) const;
  int fit_fallback(json& summary, const std::vector<std::string>& derived);

  RagEngine& e_;
  const QueryFile& qf_;
  const std::vector<Query>& qs_;
  const EvalRunOptions& o_;
  const ModeSpec baseline_;
  std::vector<ModeSpec> specs_;    // the modes besides the baseline
  std::vector<std::string> gated_;  // the modes the gate checks (reuse only when asked for)
  EvalSettings settings_;
  std::map<std::string, ModeSpec> spec_of_;
  std::map<std::string, double> nominal_;  // blend modes' nominal recompute ratios
  std::vector<AlphaCandidate> alpha_candidates_;
  std::vector<EvalItem> items_;
  std::set<std::string> done_;  // ids answered before --resume
  std::vector<std::string> kept_;
  std::unique_ptr<LineWriter> answers_;
  std::optional<BaselineCache> baseline_cache_;
  size_t skipped_ = 0, baselines_cached_ = 0;
  std::optional<Progress> bar_;
  std::map<size_t, OpenQuery> open_;
  size_t emit_ = 0;  // the next query, in input order, to write
  bool any_freq_ = false;
  ChunkAccessTable ca_{kDefaultCaWindow, 1};
  AnswerBatch batch_;
  size_t next_query_ = 0, next_mode_ = 0;  // the next job to admit
};

EvalRun::EvalRun(RagEngine& e, const QueryFile& qf, const EvalRunOptions& o)
    : e_(e), qf_(qf), qs_(qf.queries), o_(o), baseline_(parse_mode_spec(o.baseline)), batch_(e.answerer(), o.batch) {}

void EvalRun::add_spec(const ModeSpec& s) {
  if (s.name() == baseline_.name()) return;
  for (const ModeSpec& o : specs_)
    if (o.name() == s.name()) return;
  specs_.push_back(s);
}

// The variants: the modes as given, each blend or craft mode without a ratio once per sweep value,
// and reuse — the reference recovery is measured against — when not given (not gated then).
void EvalRun::plan_modes() {
  for (const std::string& m : o_.modes) {
    const ModeSpec s = parse_mode_spec(m);
    if ((s.mode == ReuseMode::blend || s.mode == ReuseMode::craft) && !s.ratio && !o_.sweep.empty()) {
      for (double r : o_.sweep) {
        ModeSpec v = s;
        v.ratio = r;
        add_spec(v);
      }
    } else {
      add_spec(s);
    }
  }
  for (const ModeSpec& s : specs_) gated_.push_back(s.name());
  if (baseline_.name() != kReference) add_spec(ModeSpec(ReuseMode::reuse));

  const ModeDefaults& d = o_.defaults;
  const BlendParams defaults = e_.blend_defaults(d);
  settings_.model_fingerprint = CacheKeys(e_.model(), e_.format()).model_fingerprint();
  const KvStore* store = e_.store();
  const Backend& backend = e_.model().backend();
  settings_.engine = engine_identity(settings_.model_fingerprint, backend.name(), backend.kernels(), backend.threads(),
                                     store && !store->foreign() ? store->info().dtype : "none");
  settings_.baseline = baseline_.name();
  settings_.modes = {baseline_.name()};
  settings_.recompute_ratio = d.recompute_ratio;
  settings_.check_layers = d.check_layers;
  settings_.max_tokens = d.max_tokens;
  settings_.top_k = o_.top_k;
  settings_.selection = selection_name(defaults.selection);
  settings_.sink_tokens = d.sink_tokens;
  settings_.check_at = d.check_at;
  auto uses_alpha = [](const ModeSpec& s) { return s.mode == ReuseMode::craft || s.mode == ReuseMode::auto_; };
  settings_.with_craft = uses_alpha(baseline_) || std::any_of(specs_.begin(), specs_.end(), uses_alpha);
  if (settings_.with_craft) {
    settings_.alpha = e_.craft_alpha();
    settings_.focus_window = d.focus_window;
  }
  spec_of_.emplace(baseline_.name(), baseline_);
  for (const ModeSpec& s : specs_) {
    settings_.modes.push_back(s.name());
    spec_of_.emplace(s.name(), s);
    if (s.mode == ReuseMode::blend) nominal_[s.name()] = s.blend(defaults).recompute_ratio;
  }
  // The α fit's candidates: craft without an ablation, each at its α.
  for (const ModeSpec& s : specs_)
    if (s.mode == ReuseMode::craft && !s.ablation) alpha_candidates_.push_back({s.name(), e_.options(d, s).craft.alpha});
  any_freq_ = std::any_of(spec_of_.begin(), spec_of_.end(), [](const auto& s) { return s.second.freq_order; });
}

// Resume: keep the records of the latest run, interrupted (FILE.partial) or finished (FILE).
void EvalRun::resume() {
  std::set<std::string> ids;
  for (const Query& q : qs_) ids.insert(q.id);
  for (const std::string& from : {o_.answers + ".partial", o_.answers}) {
    if (!fs::exists(from)) continue;
    ResumedEval r = read_eval_records(from, settings_, ids);
    std::fprintf(stderr, "ragkv: eval: resuming with %zu answered queries from %s%s\n", r.items.size(), from.c_str(),
                 r.dropped_partial_line ? " (its unfinished last line dropped)" : "");
    items_ = std::move(r.items);
    done_ = std::move(r.ids);
    kept_ = std::move(r.lines);
    break;
  }
}

void EvalRun::fail_query(size_t qi, const Error& err) {
  if (o_.on_error != OnError::skip) throw Error(query_error(qs_[qi], err));
  ++skipped_;
  std::fprintf(stderr, "ragkv: skipped %s\n", query_error(qs_[qi], err).c_str());
  open_[qi].failed = true;
}

// A query's record is written once all its modes are in, in input order.
void EvalRun::emit_ready() {
  const size_t n_modes = settings_.modes.size();
  for (; emit_ < qs_.size(); ++emit_) {
    if (done_.count(qs_[emit_].id)) continue;
    const auto it = open_.find(emit_);
    if (it == open_.end() || it->second.in_flight > 0) break;
    OpenQuery& oq = it->second;
    if (!oq.failed && oq.by_mode.size() < n_modes) break;
    if (!oq.failed) {
      const json record = eval_record(qs_[emit_].id, qs_[emit_].answers, oq.chunk_ids, oq.by_mode, settings_);
      if (answers_) answers_->line(record.dump());
      items_.push_back(eval_item_of(record, settings_));
    }
    open_.erase(it);
  }
}

// A query's first job: retrieve, order its chunks for the +freq modes, and look its baseline up.
void EvalRun::open_query(size_t qi) {
  const Query& q = qs_[qi];
  OpenQuery& oq = open_[qi];
  try {
    oq.ctx = e_.retriever().context_for(q);
    for (const Chunk* c : oq.ctx->chunks) oq.chunk_ids.push_back(c->id);
    if (any_freq_) {  // CRAFT §4: the CA-Table counts every query's chunks, in input order, once
      oq.freq_chunks = permuted(oq.ctx->chunks, ca_.admit(oq.chunk_ids, /*freq_order=*/true).order);
    }
    if (baseline_cache_) {
      BaselineKey key;
      key.model_fingerprint = settings_.model_fingerprint;
      key.baseline = baseline_.name();
      key.engine = settings_.engine.dump();
      key.max_tokens = o_.defaults.max_tokens;
      key.prompt_hash = e_.answerer().prompt_hash(q.question, baseline_.freq_order ? oq.freq_chunks : oq.ctx->chunks);
      oq.key = std::move(key);
      if (std::optional<AnswerRecord> b = baseline_cache_->find(*oq.key)) {
        oq.by_mode.emplace(baseline_.name(), std::move(*b));
        ++baselines_cached_;
        bar_->add();
      }
    }
  } catch (const Error& err) {
    fail_query(qi, err);
  }
}

// Admits the next (query, mode) job, or moves past a finished or failed query; false when every
// query has been admitted.
bool EvalRun::admit_next() {
  if (next_query_ >= qs_.size()) return false;
  const size_t n_modes = settings_.modes.size();
  const size_t qi = next_query_;
  const Query& q = qs_[qi];
  if (done_.count(q.id)) {
    ++next_query_;
    return true;
  }
  OpenQuery& oq = open_[qi];
  if (next_mode_ == 0 && !oq.ctx && !oq.failed) open_query(qi);
  if (oq.failed || next_mode_ >= n_modes) {
    ++next_query_;
    next_mode_ = 0;
    return true;
  }
  const size_t mi = next_mode_++;
  if (oq.by_mode.count(settings_.modes[mi])) return true;
  try {
    const ModeSpec& spec = spec_of_.at(settings_.modes[mi]);
    batch_.admit(qi * n_modes + mi, q.question, spec.freq_order ? oq.freq_chunks : oq.ctx->chunks,
                 e_.options(o_.defaults, spec));
    ++oq.in_flight;
  } catch (const Error& err) {
    fail_query(qi, err);
  }
  return true;
}

// Every (query, mode) answer is a job of one AnswerBatch (batch N decodes N together; eval's modes
// read the store as it is, so the order of jobs cannot change an answer).
void EvalRun::answer_all() {
  const size_t n_modes = settings_.modes.size();
  for (;;) {
    while (batch_.can_admit() && admit_next()) {
    }
    if (batch_.empty()) {
      emit_ready();
      if (next_query_ >= qs_.size()) break;
      continue;
    }
    for (auto& [tag, r] : batch_.step()) {
      OpenQuery& oq = open_.at(tag / n_modes);
      const std::string& m = settings_.modes[tag % n_modes];
      --oq.in_flight;
      bar_->add();
      if (oq.failed) continue;
      r.retrieval_ms = oq.ctx->retrieval_ms;
      if (oq.key && m == baseline_.name()) baseline_cache_->add(*oq.key, qs_[tag / n_modes].id, r);
      oq.by_mode.emplace(m, std::move(r));
    }
    emit_ready();
  }
}

void EvalRun::write_report(const json& summary) const {
  const fs::path report(o_.report);
  std::string picture;
  if (report.extension() == ".md" && has_tradeoff(summary)) {
    const TradeoffPlot plot = write_tradeoff_plot(summary, report.parent_path() / report.stem());
    if (plot.svg.empty())
      std::fprintf(stderr, "ragkv: eval: no picture (%s); its data and gnuplot script are %s, %s\n", plot.note.c_str(),
                   plot.data.c_str(), plot.script.c_str());
    else
      picture = plot.svg.filename().string();
  }
  write_file_atomic(report, {report.extension() == ".md" ? eval_markdown(summary, picture) : summary.dump(2) + "\n"});
}

// Cache-Craft Eq. 13: the smallest α whose craft run passes the gate becomes the store's.
int EvalRun::fit_alpha(json& summary, const std::vector<GateCheck>& checks) {
  const AlphaFit fit = ragkv::fit_alpha(summary, checks, alpha_candidates_);
  summary["alpha_fit"] = fit.table;
  if (!fit.alpha) {
    std::fprintf(stderr, "ragkv: eval: no alpha tried passes the gate; %s/craft.json unchanged\n", o_.store_path.c_str());
    return 1;
  }
  CraftStoreSettings cs = read_craft_settings(*e_.store());
  cs.alpha = *fit.alpha;
  cs.alpha_fit = {{"queries", o_.queries_path}, {"n_queries", items_.size()}, {"gate", summary["gate"]},
                  {"candidates", fit.table}};
  write_craft_settings(*e_.store(), cs);
  std::fprintf(stderr, "ragkv: eval: alpha %g is the smallest that passes the gate; stored in %s/craft.json\n",
               *fit.alpha, o_.store_path.c_str());
  return 0;
}

bool EvalRun::evaluates_auto() const {
  return std::find(settings_.modes.begin(), settings_.modes.end(), "auto") != settings_.modes.end();
}

// Whether auto's own rule (the store's fitted one, else the default) is derived: where auto is
// evaluated against full on a store, what answer's auto does there.
bool EvalRun::derives_auto_rule() const { return evaluates_auto() && baseline_.name() == "full" && e_.has_store(); }

// The rules eval derives: --fallback-margins, and auto's own (derives_auto_rule).
std::vector<FallbackRule> EvalRun::fallback_rules() const {
  std::vector<FallbackRule> rules = o_.fallback_margins;
  if (!derives_auto_rule()) return rules;
  const FallbackRule fitted = e_.auto_fallback();
  const bool listed =
      std::any_of(rules.begin(), rules.end(), [&](const FallbackRule& r) { return r.name() == fitted.name(); });
  if (fitted.active() && !listed) rules.push_back(fitted);
  return rules;
}

// The modes the gate judges: each as `answer` runs it, so auto under its own rule (derived above)
// where that rule falls back at all; auto before any fallback is reported beside it.
std::vector<std::string> EvalRun::gated_modes(const std::vector<std::string>& derived) const {
  std::vector<std::string> gated = gated_;
  if (!derives_auto_rule()) return gated;
  const FallbackRule rule = e_.auto_fallback();
  const std::string as_answered = fallback_mode_name("auto", rule);
  if (!rule.active() || std::find(derived.begin(), derived.end(), as_answered) == derived.end()) return gated;
  std::replace(gated.begin(), gated.end(), std::string("auto"), as_answered);
  return gated;
}

// The cheapest of auto alone and auto under each derived rule that passes the gate becomes the
// store's rule (none when auto alone is cheapest).
int EvalRun::fit_fallback(json& summary, const std::vector<std::string>& derived) {
  std::vector<FallbackCandidate> candidates{{"auto", FallbackRule{}}};
  std::vector<std::string> names{"auto"};
  for (const std::string& name : derived) {
    std::string base;
    FallbackRule rule;
    if (parse_fallback_mode_name(name, base, rule) && base == "auto") {
      candidates.push_back({name, rule});
      names.push_back(name);
    }
  }
  const std::vector<GateCheck> checks = gate_checks(summary, o_.gate, names);
  const FallbackFit fit = ragkv::fit_fallback(summary, checks, candidates);
  summary["fallback_fit"] = fit.table;
  if (!fit.rule) {
    std::fprintf(stderr, "ragkv: eval: auto passes the gate under no rule tried; %s/craft.json unchanged\n",
                 o_.store_path.c_str());
    return 1;
  }
  CraftStoreSettings cs = read_craft_settings(*e_.store());
  cs.fallback = fit.rule->name();  // "0" when auto alone is cheapest: no fallback, not the default rule
  cs.fallback_fit = {{"queries", o_.queries_path},
                     {"n_queries", items_.size()},
                     {"gate", gate_json(checks, o_.gate)},
                     {"candidates", fit.table}};
  write_craft_settings(*e_.store(), cs);
  std::fprintf(stderr, "ragkv: eval: auto passes the gate at the least compute %s; stored in %s/craft.json\n",
               fit.rule->active() ? ("with --fallback-margin " + fit.rule->name()).c_str() : "without a fallback",
               o_.store_path.c_str());
  return 0;
}

EvalRunResult EvalRun::run() {
  if (o_.fit_alpha && e_.store()->foreign()) fail("--fit-alpha: {} belongs to another model", o_.store_path);
  if (o_.fit_fallback && (!e_.has_store() || e_.store()->foreign()))
    fail("--fit-fallback: the rule is stored with the store's caches; give a --store of this model");
  plan_modes();
  if (o_.fit_fallback && (!evaluates_auto() || o_.fallback_margins.empty())) {
    std::fprintf(stderr, "ragkv: eval: --fit-fallback needs auto among --modes and the rules to try in --fallback-margins\n");
    return {json(nullptr), {}, 2};
  }
  if (o_.fit_alpha && alpha_candidates_.empty()) {
    std::fprintf(stderr, "ragkv: eval: --fit-alpha needs craft modes at several alphas (craft with --sweep, or craft@A,...)\n");
    return {json(nullptr), {}, 2};
  }
  if (o_.resume) resume();
  if (!o_.answers.empty()) answers_ = std::make_unique<LineWriter>(o_.answers, kept_);
  if (!o_.baseline_cache.empty()) {
    if (baseline_.mode != ReuseMode::full && baseline_.mode != ReuseMode::prefix)
      fail("--baseline-cache keeps full and prefix baselines, not {}", baseline_.name());
    baseline_cache_.emplace(o_.baseline_cache);
  }
  bar_.emplace("eval", int64_t((qs_.size() - done_.size()) * settings_.modes.size()), "answers");
  answer_all();
  bar_->finish();
  if (answers_) answers_->close();
  if (items_.empty())
    fail("{}: no query could be answered ({} skipped, {} bad lines, {} answered before --resume)", o_.queries_path,
         skipped_, qf_.skipped.size(), done_.size());
  std::vector<std::string> order(settings_.modes.begin() + 1, settings_.modes.end());
  const std::vector<std::string> derived = add_margin_fallbacks(items_, baseline_.name(), order, fallback_rules());
  order.insert(order.end(), derived.begin(), derived.end());
  json summary = eval_summary(items_, baseline_.name(), order, kReference, nominal_);
  summary["skipped_lines"] = qf_.skipped.size();
  summary["skipped_queries"] = skipped_;
  summary["selection"] = settings_.selection;
  if (e_.store() && e_.store()->remote()) summary["remote"] = e_.store()->remote()->stats().to_json();
  if (baseline_cache_) {
    // TTFT ratios then compare against baselines timed by earlier runs of this binary.
    summary["baseline_cache"] = {{"file", o_.baseline_cache}, {"taken", baselines_cached_}};
    std::fprintf(stderr, "ragkv: eval: %zu baseline answers taken from %s\n", baselines_cached_, o_.baseline_cache.c_str());
  }
  EvalRunResult result;
  result.checks = gate_checks(summary, o_.gate, gated_modes(derived));
  summary["gate"] = gate_json(result.checks, o_.gate);
  if (!o_.report.empty()) write_report(summary);
  if (!o_.junit.empty()) write_file_atomic(o_.junit, {gate_junit(result.checks, "ragkv-eval")});
  result.exit_code = o_.fit_alpha ? fit_alpha(summary, result.checks) : gate_passed(result.checks) ? 0 : 1;
  if (o_.fit_fallback) result.exit_code = std::max(o_.fit_alpha ? result.exit_code : 0, fit_fallback(summary, derived));
  result.summary = std::move(summary);
  return result;
}

}  // namespace

EvalRunResult run_eval(RagEngine& engine, const QueryFile& queries, const EvalRunOptions& o) {
  return EvalRun(engine, queries, o).run();
}

}  // namespace ragkv
