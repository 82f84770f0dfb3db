// RagAnswerer: plan, prefill with retry on a cache that fails mid-load, greedy decode, metrics.
#include "core/rag/answer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/format/checksum.h"
#include "core/util/error.h"
#include "core/kv/claim-set.h"
#include "core/kv/layer-loader.h"
#include "core/rag/variant-compute.h"
#include "retrieval/chunker.h"

namespace ragkv {

nlohmann::json AnswerRecord::metrics() const {
  const PrefillStats& p = prefill;
  const int64_t computed = p.n_layer > 0 ? int64_t(std::llround(double(p.computed_token_layers) / p.n_layer)) : 0;
  nlohmann::json j = {{"ttft_ms", ttft_ms()},
          {"retrieval_ms", retrieval_ms},
          {"plan_ms", plan_ms},
          {"prefill_ms", p.prefill_ms},
          {"load_ms", p.load_ms},
          {"load_hidden_ms", std::max(0.0, p.load_ms - p.load_wait_ms)},
          {"prefill_tokens", p.prompt_tokens},
          {"computed_tokens", computed},
          {"reused_tokens", p.reused_tokens},
          {"compute_fraction", p.compute_fraction()},
          {"reused_recompute_fraction", p.reused_tokens > 0 ? nlohmann::json(p.reused_recompute_fraction()) : nlohmann::json(nullptr)},
          {"decode_ms", decode_ms},
          {"output_tokens", output_ids.size()},
          {"cache_hits", {{"device", cache.device_hits}, {"host", cache.host_hits}, {"disk", cache.disk_hits}}},
          {"cache_exact_hits", cache.exact_hits},
          {"exact_path_chunks", exact_path_chunks},
          {"chunk_hits", chunk_hits},
          {"chunk_memory_hits", chunk_memory_hits},
          {"cache_misses", cache.misses},
          {"cache_bad", cache.bad}};
  j["composed"] = composed;
  if (first_margin >= 0) j["first_step_margin"] = first_margin;
  if (p.first_pass_token >= 0) {
    j["first_pass_token"] = p.first_pass_token;
    j["first_pass_margin"] = p.first_pass_margin;
    j["repair_moved_first_token"] = repair_moved_first_token;
  }
  j["exact_prefix_tokens"] = exact_prefix_tokens;
  if (fell_back) j["fallback"] = true;
  nlohmann::json chunks = nlohmann::json::array();
  for (const ChunkProvenance& c : provenance) chunks.push_back(c.to_json());
  j["provenance"] = std::move(chunks);
  if (written_back > 0) j["variants_written"] = written_back;
  if (carried_tokens > 0) j["history_reused_tokens"] = carried_tokens;
  if (cache_update_ms > 0) j["cache_update_ms"] = cache_update_ms;
  if (!craft.empty()) j["craft"] = craft_metrics();
  if (load_control) j["load_control"] = load_control->to_json();
  return j;
}

nlohmann::json AnswerRecord::craft_metrics() const {
  nlohmann::json chunks = nlohmann::json::array();
  int64_t fix = 0;
  size_t variants = 0, exact = 0;
  for (const CraftChunkRecord& c : craft) {
    chunks.push_back({{"chunk", c.chunk}, {"context_chunks", c.context_chunks}, {"exact", c.exact}, {"beta", c.beta},
                      {"gamma", c.gamma}, {"cci", c.cci}, {"cfo", c.cfo}, {"fix_tokens", c.fix_tokens}});
    fix += c.fix_tokens;
    variants += c.context_chunks > 0;
    exact += c.exact;
  }
  return {{"chunks", chunks},
          {"fix_tokens", fix},
          {"variant_chunks", variants},
          {"exact_chunks", exact},
          {"focus_cutoff_layer", prefill.focus_cutoff_layer},
          {"focused_chunks", prefill.focused_chunks}};
}

RagAnswerer::RagAnswerer(const Model& model, const PromptFormat& format, KvTiers* tiers, VariantLedger* ledger)
    : model_(model), format_(format), tiers_(tiers), ledger_(ledger), keys_(model, format) {}

uint64_t RagAnswerer::prompt_hash(const std::string& question, const std::vector<const Chunk*>& chunks) const {
  const std::shared_ptr<const RagPrompt> p = prompt(chunks, question);
  return checksum64(p->ids.data(), p->ids.size() * sizeof(int32_t));
}

std::shared_ptr<const RagPrompt> RagAnswerer::prompt(const std::vector<const Chunk*>& chunks, const std::string& question,
                                                     const std::vector<PastTurn>& history) const {
  // The inputs, length-prefixed (no two lists give the same bytes): what the prompt is made of.
  std::string key;
  auto add = [&key](const std::string& s) {
    const uint64_t n = s.size();
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key += s;
  };
  auto add_chunks = [&](const std::vector<const Chunk*>& cs) {
    add(std::to_string(cs.size()));
    for (const Chunk* c : cs) {
      add(c->id);
      add(c->title);
      add(c->text);
    }
  };
  add_chunks(chunks);
  add(question);
  for (const PastTurn& t : history) {
    add_chunks(t.chunks);
    add(t.question);
    add(t.answer);
  }
  const uint64_t h = checksum64(key.data(), key.size());
  const std::lock_guard<std::mutex> lock(memo_mutex_);
  if (const auto it = memo_.find(h); it != memo_.end() && it->second.key == key) return it->second.prompt;
  auto built = std::make_shared<const RagPrompt>(format_.build(chunks, question, history));
  ++prompts_built_;
  if (memo_.count(h) == 0) memo_order_.push_back(h);
  memo_[h] = {std::move(key), built};
  while (memo_order_.size() > kPromptMemo) {
    memo_.erase(memo_order_.front());
    memo_order_.pop_front();
  }
  return built;
}

// The prompt's knowledge-tree segments in prompt order (RAGCache §5.1): the exact path it reused,
// the canonical caches it reused elsewhere (depth-1 nodes), and — for the dense modes, whose every
// computed segment is computed as `full` computes it — the segments it computed, as new nodes.
// Cache-Craft's approximate variants are not tree nodes. Cost per token (Formula 4): the profiled
// T(α, β)/β of this prompt for computed nodes, the measured read time per token for disk reads.
std::vector<PromptNode> RagAnswerer::tree_nodes(const RagPrompt& prompt, const PrefillPlan& plan,
                                                const PrefillStats& st, const AnswerOptions& opt) const {
  std::vector<PromptNode> out;
  const double alpha = double(st.reused_tokens);
  const double beta = double(prompt.n_tokens()) - alpha;
  const double compute_cost = beta > 0 ? tiers_->cost().estimate_ms(alpha, beta) / beta : 0.0;
  const double disk_cost = tiers_->cost().load_ms_per_token(int(KvTier::disk));
  std::vector<std::string> chain;
  bool promote = true;  // CRAFT: every chunk so far passed the promotion threshold
  size_t chunk = 0;
  for (size_t s = 0; s + 1 < prompt.segments.size(); ++s) {
    const PromptSegment& seg = prompt.segments[s];
    const SegmentPlan& sp = plan.segments[s];
    if (seg.kind == PromptSegment::Kind::turn) break;  // a conversation's own text: no node from here on
    const bool is_chunk = seg.kind == PromptSegment::Kind::chunk;
    if (is_chunk) promote = promote && (opt.promote.empty() || (chunk < opt.promote.size() && opt.promote[chunk]));
    PromptNode node;
    node.row = seg.begin;
    const ChunkKvMeta own = s == 0 || chain.empty() ? keys_.segment(seg) : keys_.chain_node(seg, chain);
    if (sp.kv && sp.exact() && sp.kv->meta().exact_chain == own.exact_chain) {
      node.key = own;
      node.served_from = sp.kv->tier();
    } else if (sp.kv && sp.kv->meta().context.empty() && sp.kv->meta().donor.empty()) {
      node.key = keys_.segment(seg);  // a canonical cache reused at another position
      node.served_from = sp.kv->tier();
    } else if (!sp.kv && !plan.sparse()) {
      node.key = own;
      node.cost_per_token = compute_cost;
      node.admit = promote;
    } else {
      node.key.chunk_id.clear();  // an approximate variant or donor cache, or computed approximately: not a node
    }
    if (node.served_from == KvTier::disk) node.cost_per_token = disk_cost;
    if (!node.key.chunk_id.empty()) out.push_back(std::move(node));
    if (is_chunk) {
      chain.push_back(seg.chunk_id);
      ++chunk;
    }
  }
  return out;
}

uint64_t CarriedKv::bytes() const {
  uint64_t b = 0;
  for (const auto& k : kv) b += k->bytes();
  return b;
}

// The previous turn's segments this prompt repeats from its start: the same kind, chunk, tokens
// and position (the earliest turns leave a prompt that would overflow: then nothing matches).
std::vector<std::shared_ptr<const SegmentKv>> RagAnswerer::carried_segments(const RagPrompt& prompt,
                                                                           const AnswerOptions& opt) const {
  std::vector<std::shared_ptr<const SegmentKv>> out;
  if (!opt.carried || opt.mode == ReuseMode::full || opt.mode == ReuseMode::prefix || opt.require_exact || !tiers_)
    return out;
  const CarriedKv& c = *opt.carried;
  for (size_t s = 0; s < c.segments.size() && s + 1 < prompt.segments.size(); ++s) {
    const PromptSegment &was = c.segments[s], &is = prompt.segments[s];
    if (was.kind != is.kind || was.begin != is.begin || was.chunk_id != is.chunk_id || was.ids != is.ids) break;
    out.push_back(c.kv[s]);
  }
  return out;
}

// Every segment of the prompt but the question, for the conversation's next turn: those it reused
// from the previous turn as they were (never recomputed), the others copied from kv's rows.
std::shared_ptr<const CarriedKv> RagAnswerer::carry(const RagPrompt& prompt, const PrefillPlan& plan,
                                                    const std::vector<std::shared_ptr<const SegmentKv>>& carried,
                                                    const KvCache& kv, bool composed) const {
  auto out = std::make_shared<CarriedKv>();
  out->composed = composed;
  Backend& backend = model_.backend();
  for (size_t s = 0; s + 1 < prompt.segments.size(); ++s) {
    const PromptSegment& seg = prompt.segments[s];
    out->segments.push_back(seg);
    if (s < carried.size()) {
      out->kv.push_back(carried[s]);
      continue;
    }
    ChunkKvMeta m = seg.kind == PromptSegment::Kind::chunk ? keys_.chunk(seg.chunk_id, seg.ids) : keys_.prefix();
    if (seg.kind == PromptSegment::Kind::turn) {  // a turn's text has no store key: named for what it is
      m.chunk_id = "@turn";
      m.n_tokens = uint32_t(seg.ids.size());
      m.token_hash = token_ids_hash(seg.ids);
    }
    m.context = plan.segments[s].context;
    m.first_pos = int32_t(seg.begin);
    if (backend.kind() == DeviceKind::cpu)
      out->kv.push_back(HostSegmentKv::from_rows(backend, std::move(m), kv.k, kv.v, seg.begin));
    else
      out->kv.push_back(DeviceSegmentKv::from_rows(backend, std::move(m), kv.k, kv.v, seg.begin));
  }
  return out;
}

namespace {
// The leading segments a margin fallback keeps: those `prefix` would load — the prefix, then chunks,
// each cached exactly where and after what it stands (SegmentPlan::exact) — never the question.
size_t fallback_kept_segments(const RagPrompt& prompt, const PrefillPlan& plan) {
  size_t s = 0;
  while (s + 1 < prompt.segments.size() && (s == 0 || prompt.segments[s].kind == PromptSegment::Kind::chunk) &&
         plan.segments[s].exact())
    ++s;
  return s;
}
}  // namespace

// The margin fallback: the prompt prefilled again as `prefix` does it over kv — the composed plan's
// exact-prefix caches loaded again, every later row computed, so the output is full's (bit-identical
// on a 16-bit store, as prefix's is) — and `pre` becomes its result with both prefills' time and
// compute (every reused token-layer after the exact prefix computed again). The first pass's
// signals stay. kept: the leading segments to keep (fallback_kept_segments); returns those it kept.
size_t RagAnswerer::fall_back_to_prefix(const RagPrompt& prompt, const PrefillPlan& plan, size_t kept, KvCache& kv,
                                        PrefillResult& pre) {
  const int n_layer = model_.config().n_layer;
  auto same = [&](const PromptSegment& seg) -> std::shared_ptr<const SegmentKv> {
    const size_t s = size_t(&seg - prompt.segments.data());
    return s < kept ? plan.segments[s].kv : nullptr;
  };
  const ChainLookup same_chain = [&](const PromptSegment& seg, const std::vector<std::string>&) { return same(seg); };
  PrefillResult again;
  try {
    again = prefill_prompt(model_, prompt, plan_prefill(prompt, ReuseMode::prefix, BlendParams{}, n_layer, same,
                                                        nullptr, CraftParams{}, same_chain),
                           kv, ws_);
  } catch (const ChunkLoadFailed&) {  // a cache read a moment ago fails now: everything computed
    kept = 0;
    again = prefill_prompt(model_, prompt, plan_prefill(prompt, ReuseMode::full, BlendParams{}, n_layer, SegmentLookup{}),
                           kv, ws_);
  }
  PrefillStats& s = again.stats;
  const PrefillStats& first = pre.stats;
  s.prefill_ms += first.prefill_ms;
  s.load_ms += first.load_ms;
  s.load_wait_ms += first.load_wait_ms;
  s.computed_token_layers += first.computed_token_layers;
  s.recomputed_reused_token_layers =
      first.recomputed_reused_token_layers + (first.reused_tokens - s.reused_tokens) * n_layer;
  s.reused_tokens = first.reused_tokens;
  for (size_t i = 0; i < s.row_layers.size() && i < first.row_layers.size(); ++i) s.row_layers[i] += first.row_layers[i];
  s.kept_after_check = first.kept_after_check;
  s.focus_cutoff_layer = first.focus_cutoff_layer;
  s.focused_chunks = first.focused_chunks;
  s.first_pass_token = first.first_pass_token;
  s.first_pass_margin = first.first_pass_margin;
  pre = std::move(again);
  return kept;
}

// Per chunk of the prompt, in order: where its KV came from and how much of it was computed.
std::vector<ChunkProvenance> RagAnswerer::provenance(const RagPrompt& prompt, const PrefillPlan& plan,
                                                     size_t n_carried, const AnswerRecord& rec) const {
  std::vector<ChunkProvenance> out;
  const PrefillStats& st = rec.prefill;
  for (size_t s = 0; s < prompt.segments.size(); ++s) {
    const PromptSegment& seg = prompt.segments[s];
    if (seg.kind != PromptSegment::Kind::chunk) continue;
    const SegmentPlan& sp = plan.segments[s];
    ChunkProvenance p;
    p.chunk = seg.chunk_id;
    p.tokens = int64_t(seg.ids.size());
    using S = ChunkProvenance::Source;
    if (sp.kv && (!rec.fell_back || s < rec.fallback_kept_segments)) {
      const ChunkKvMeta& m = sp.kv->meta();
      p.source = s < n_carried          ? S::history
                 : sp.exact()           ? S::exact_prefix
                 : !m.donor.empty()     ? S::donor
                 : m.context.empty()    ? S::canonical
                                        : S::variant;
      p.tier = sp.kv->tier();
      if (p.source == S::variant) p.context = m.context;
      if (p.source == S::donor) p.donor = m.donor;
    }
    for (int64_t i = seg.begin; i < seg.end() && size_t(i) < st.row_layers.size(); ++i)
      p.recomputed_token_layers += st.row_layers[size_t(i)];
    p.recomputed_tokens = std::count_if(st.final_rows.begin(), st.final_rows.end(),
                                        [&](int32_t r) { return r >= seg.begin && r < seg.end(); });
    out.push_back(std::move(p));
  }
  return out;
}

const char* provenance_source_name(ChunkProvenance::Source s) {
  switch (s) {
    case ChunkProvenance::Source::computed: return "computed";
    case ChunkProvenance::Source::exact_prefix: return "exact_prefix";
    case ChunkProvenance::Source::canonical: return "canonical";
    case ChunkProvenance::Source::variant: return "variant";
    case ChunkProvenance::Source::history: return "history";
    case ChunkProvenance::Source::donor: return "donor";
  }
  return "computed";
}

nlohmann::json ChunkProvenance::to_json() const {
  nlohmann::json j = {{"chunk", chunk}, {"source", provenance_source_name(source)}, {"tokens", tokens},
                      {"recomputed_tokens", recomputed_tokens}, {"recomputed_token_layers", recomputed_token_layers}};
  if (tier) j["tier"] = kv_tier_name(*tier);
  if (source == Source::variant) j["context"] = context;
  if (source == Source::donor) j["donor"] = donor;
  return j;
}

AnswerRecord RagAnswerer::answer(const std::string& question, const std::vector<const Chunk*>& chunks,
                                 const AnswerOptions& opt) {
  PrefilledAnswer p = prefill(question, chunks, opt);
  DecodeResult d = decode_text(model_, p.kv, ws_, std::move(p.logits), p.gen);
  return finish(std::move(p), std::move(d));
}

AnswerRecord RagAnswerer::finish(PrefilledAnswer&& p, DecodeResult&& d) {
  AnswerRecord rec = std::move(p.record);
  rec.answer = std::move(d.text);
  rec.output_ids = std::move(d.output_ids);
  rec.decode_ms = d.decode_ms;
  return rec;
}

PrefilledAnswer RagAnswerer::prefill(const std::string& question, const std::vector<const Chunk*>& chunks,
                                     const AnswerOptions& opt) {
  const std::shared_ptr<const RagPrompt> built = prompt(chunks, question, opt.history);
  const RagPrompt& prompt = *built;
  const int64_t n_ctx = prompt.n_tokens() + opt.gen.max_tokens;
  if (n_ctx > model_.config().n_ctx_train)
    fail("the prompt ({} tokens for {} chunks) plus {} new tokens exceeds the model's context of {} tokens",
         prompt.n_tokens(), chunks.size(), opt.gen.max_tokens, model_.config().n_ctx_train);

  AnswerRecord rec;
  rec.mode = reuse_mode_name(opt.mode);
  for (const Chunk* c : chunks) rec.chunk_ids.push_back(c->id);

  const VariantSource variants = tier_variants(keys_, tiers_);
  const std::vector<std::shared_ptr<const SegmentKv>> carried = carried_segments(prompt, opt);
  for (const auto& c : carried) rec.carried_tokens += c->meta().n_tokens;
  // --require exact: prefix's plan (exact prefixes reused, the rest computed), whatever the mode.
  const ReuseMode mode = opt.require_exact && opt.mode != ReuseMode::full ? ReuseMode::prefix : opt.mode;
  const auto t_plan = std::chrono::steady_clock::now();
  PrefillPlan plan = plan_prefill(prompt, mode, opt.blend, model_.config().n_layer, tier_lookup(keys_, tiers_),
                                  &variants, opt.craft, tier_chain_lookup(keys_, tiers_), carried);
  if (opt.load_control) {  // load or recompute each cached segment, the preload depth, the hidden ratio
    const PlanLoad pl = plan_load(*opt.load_control, prompt, plan);
    LoadControl lc = opt.load_control->decide(pl.cached, pl.base_compute_ms, plan.blend.recompute_ratio,
                                              pl.pipelined, opt.raise_ratio && opt.apply_load_control);
    if (opt.apply_load_control) apply_load_control(lc, plan, opt.blend.preload_depth);
    rec.load_control = std::move(lc);
  }
  rec.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_plan).count();
  KvCache kv = model_.new_kv_cache(n_ctx);
  // Write-back: the chunks after the first that this prompt computes, with their metadata.
  std::vector<size_t> chunk_segs;
  std::vector<int64_t> chunk_begin, chunk_end;
  for (size_t s = 0; s < prompt.segments.size(); ++s) {
    if (prompt.segments[s].kind == PromptSegment::Kind::turn) break;  // after a turn: not a chunk-chain context
    if (prompt.segments[s].kind == PromptSegment::Kind::chunk) {
      chunk_segs.push_back(s);
      chunk_begin.push_back(prompt.segments[s].begin);
      chunk_end.push_back(prompt.segments[s].end());
    }
  }
  auto to_write = [&] {
    std::vector<size_t> out;
    if (!opt.write_back || !tiers_ || tiers_->store().foreign() || !plan.sparse()) return out;
    for (size_t i = 1; i < chunk_segs.size(); ++i)
      if (!plan.segments[chunk_segs[i]].kv) out.push_back(i);
    return out;
  };
  std::optional<VariantStatsAccumulator> acc;
  PrefillResult pre;
  for (;;) {
    acc.reset();
    if (!to_write().empty())
      acc.emplace(chunk_begin, chunk_end, model_.config().n_head, prompt.segments.size());
    try {
      pre = prefill_prompt(model_, prompt, plan, kv, ws_, acc ? &*acc : nullptr);
      break;
    } catch (const ChunkLoadFailed& e) {  // a layer block failed its checksum: recompute that segment
      if (tiers_ && plan.segments.at(e.job).kv) tiers_->discard(plan.segments[e.job].kv->meta());
      plan.drop_cache(e.job);
    }
  }
  rec.cache = plan.counts;
  rec.composed = std::any_of(plan.segments.begin(), plan.segments.end(),
                             [](const SegmentPlan& sp) { return sp.kv && !sp.exact(); }) ||
                 (!carried.empty() && opt.carried->composed);
  rec.first_margin = top2_probability_gap(pre.logits);
  rec.repair_moved_first_token = pre.stats.first_pass_token >= 0 && argmax(pre.logits) != pre.stats.first_pass_token;
  const size_t kept = fallback_kept_segments(prompt, plan);
  if (kept > 0) rec.exact_prefix_tokens = prompt.segments[kept - 1].end();
  if (rec.composed && opt.fallback.applies(rec.first_margin, rec.repair_moved_first_token)) {
    rec.fallback_kept_segments = fall_back_to_prefix(prompt, plan, kept, kv, pre);
    rec.fell_back = true;
    rec.composed = false;
  }
  if (acc)
    for (size_t i : to_write()) {
      const PromptSegment& seg = prompt.segments[chunk_segs[i]];
      ChunkKvMeta m = keys_.chunk(seg.chunk_id, seg.ids);
      m.context = plan.segments[chunk_segs[i]].context;
      m.first_pos = int32_t(seg.begin);
      if (tiers_->store().has_valid(m)) continue;
      // Another process computing this very file (precompute's claim, core/kv/claim-set.h) writes it.
      if (const auto c = inspect_claim(claim_path(tiers_->store().chunk_path(m))); c && !c->stale()) continue;
      // A side effect: a store that cannot take the variant (disk full, read-only) costs the
      // variant, never the answer (counted; the run warns once).
      try {
        rec.written_back += store_variant_rows(model_, tiers_->store(), m, acc->stats(i), kv, seg.begin, ledger_) > 0;
      } catch (const Error& e) {
        if (rec.write_back_failed++ == 0) rec.write_back_error = e.what();
      }
    }
  for (const SegmentPlan& sp : plan.segments)
    if (sp.choice && sp.kv) {
      const VariantChoice& c = *sp.choice;
      const size_t i = size_t(&sp - plan.segments.data());
      rec.craft.push_back({prompt.segments[i].chunk_id, sp.kv->meta().context.size(), sp.exact(), c.beta, c.gamma,
                           c.cci, c.cfo, int64_t(sp.fix.size()),
                           tiers_ && !sp.kv->meta().exact_chain  // a chain node is the tree's, not a variant
                               ? tiers_->store().chunk_path(sp.kv->meta()).filename().string()
                               : std::string()});
    }
  rec.prefill = pre.stats;
  rec.first_logits = pre.logits;
  rec.provenance = provenance(prompt, plan, carried.size(), rec);
  rec.exact_path_chunks = plan.exact_path > 1 ? plan.exact_path - 1 : 0;
  for (size_t s = 0; s < plan.segments.size(); ++s)  // RAGCache's hit rate counts chunks, not the prefix
    if (prompt.segments[s].kind == PromptSegment::Kind::chunk && plan.segments[s].kv) {
      ++rec.chunk_hits;
      rec.chunk_memory_hits += plan.segments[s].kv->tier() != KvTier::disk;
    }

  if (tiers_ && tiers_->managed() && opt.record_in_tiers) {
    const auto t0 = std::chrono::steady_clock::now();
    PrefillCostModel& cost = tiers_->cost();
    const int64_t computed = rec.prefill.prompt_tokens - rec.prefill.reused_tokens;
    if (!plan.sparse() && computed > 0)  // the online fit of T(α, β) when no profile was measured
      cost.observe(double(rec.prefill.reused_tokens), double(computed), rec.prefill.prefill_ms);
    if (rec.cache.disk_hits > 0 && rec.cache.disk_hits == rec.cache.hits() &&
        rec.prefill.reused_tokens > 0) {  // every cached segment read from disk: its rate
      const double rate = rec.prefill.load_ms / double(rec.prefill.reused_tokens);
      const double old = cost.load_ms_per_token(int(KvTier::disk));
      cost.set_load_ms_per_token(int(KvTier::disk), old > 0 ? 0.9 * old + 0.1 * rate : rate);
    }
    tiers_->record_prompt(tree_nodes(prompt, plan, rec.prefill, opt), kv.k, kv.v);
    rec.cache_update_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  if (opt.carry && plan.sparse()) rec.carried = carry(prompt, plan, carried, kv, rec.composed);
  GenerateOptions gen = opt.gen;
  gen.stop_at_newline = true;
  return {std::move(rec), std::move(kv), std::move(pre.logits), gen};
}

}  // namespace ragkv
