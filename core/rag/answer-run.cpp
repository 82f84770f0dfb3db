// The multi-query answer run: retrieval, answering order, conversations, CA-Table, batching,
// comparison and summary (core/rag/answer-run.h).
#include "core/rag/answer-run.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "core/kv/kv-prefetch.h"
#include "core/rag/answer-batch.h"
#include "core/rag/answer-totals.h"
#include "core/rag/cache-keys.h"
#include "core/rag/chunk-overlap.h"
#include "core/rag/query-order.h"
#include "core/rag/retrieval-pipeline.h"
#include "core/util/error.h"
#include "core/util/progress.h"
#include "core/util/turn-lock.h"

namespace ragkv {

using nlohmann::json;

std::string query_error(const Query& q, const std::exception& e) {
  const std::string what = e.what();
  if (what.starts_with(q.source + ":")) return what;
  return fmt::format("{}:{}: query {}: {}", q.source, q.line, q.id, what);
}

namespace {

// The sampling options onto an answer's decoding options (max_tokens stays the mode's).
void apply_sampling(const GenerateOptions& s, GenerateOptions& gen) {
  gen.temperature = s.temperature;
  gen.top_p = s.top_p;
  gen.seed = s.seed;
  gen.stop = s.stop;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr size_t kNone = ~size_t(0);
constexpr size_t kNotReady = kNone - 1;

// Conversations (CRAFT §4.3): a turn continues its conversation's earlier turns, so turns are
// answered in input order, one at a time per conversation; their turn numbers must increase.
struct Conversation {
  std::vector<PastTurn> turns;   // answered so far
  std::set<std::string> chunks;  // every chunk already in the conversation's prompt
  std::optional<int> last_turn;  // the last turn number seen in the file
  size_t turns_left = 0;         // in the file, not yet finished
  std::shared_ptr<const CarriedKv> carried;  // the last turn's prompt KV, for the next turn
  bool in_flight = false;
};

// The most the conversations' carried KV holds at once (host or device memory): a turn whose KV
// would pass it is not carried, and the next turn computes its history as a first turn would.
constexpr uint64_t kCarriedKvBudget = uint64_t(1) << 30;

class AnswerRun {
 public:
  AnswerRun(RagEngine& e, const QueryFile& qf, const AnswerRunOptions& o, const AnswerScorer& score,
            const std::function<void(const std::string&)>& out);
  AnswerRunResult run();

 private:
  void read_conversations();
  void retrieve_all();
  void fetch(size_t i);
  size_t next_query(bool may_wait);
  void admit(size_t qi);
  std::vector<const Chunk*> conversation_chunks(size_t qi, std::vector<const Chunk*> chunks, AnswerOptions& opt);
  void complete(size_t qi, AnswerRecord&& r);
  void finish_query(size_t qi);
  void skip(const Query& q, const Error& e);
  void flush();
  std::unique_lock<TurnLock> compute_turn();
  void answer_all();
  json summary(double answer_s) const;
  json search_summary() const;
  json cache_manager_summary() const;

  RagEngine& e_;
  const QueryFile& qf_;
  const std::vector<Query>& queries_;
  const AnswerRunOptions& o_;
  const AnswerScorer& score_;
  const std::function<void(const std::string&)>& out_;
  const ModeSpec compare_mode_;
  const CacheKeys keys_;  // the speculative loads' plan holds it
  AnswerTotals tot_;
  size_t skipped_ = 0;
  TurnLock backend_turn_;
  std::unique_ptr<KvPrefetcher> prefetch_;
  std::unique_ptr<RetrievalPipeline> retrieval_;
  double retrieve_wall_ms_ = 0;
  // Each query's chunks and prompt shape, taken from the pipeline when first needed (nullopt:
  // skipped at retrieval).
  std::vector<std::optional<RagContext>> contexts_;
  std::vector<QueryShape> shapes_;
  std::vector<uint8_t> fetched_;
  std::vector<double> wait_of_;  // the answering loop waiting for its retrieval
  std::map<std::string, Conversation> conversations_;
  uint64_t carried_bytes_ = 0;  // of the conversations' carried KV
  bool reorder_ = true;
  size_t block_ = 0;
  std::optional<QueryOrder> order_;
  size_t block_begin_ = 0, block_end_ = 0;
  ChunkAccessTable ca_;
  std::vector<std::optional<std::string>> lines_;
  std::vector<uint8_t> done_;
  size_t written_ = 0;
  std::vector<size_t> answered_order_;
  std::vector<std::vector<std::string>> prompt_chunks_;  // each prompt's chunk ids, in answering order
  std::optional<Progress> bar_;
  AnswerBatch batch_;
  std::map<size_t, std::optional<AnswerRecord>> compared_;  // the comparison answer, computed at admission
  std::map<size_t, std::vector<const Chunk*>> chunks_of_;    // a conversation turn's added chunks
  std::map<size_t, size_t> history_of_, deduplicated_of_;    // its earlier turns in the prompt, chunks dropped
  double turn_wait_ms_ = 0;
};

AnswerRun::AnswerRun(RagEngine& e, const QueryFile& qf, const AnswerRunOptions& o, const AnswerScorer& score,
                     const std::function<void(const std::string&)>& out)
    : e_(e), qf_(qf), queries_(qf.queries), o_(o), score_(score), out_(out),
      compare_mode_(o.compare.value_or(ModeSpec(ReuseMode::full))), keys_(e.model(), e.format()),
      contexts_(queries_.size()), shapes_(queries_.size()), fetched_(queries_.size(), 0),
      wait_of_(queries_.size(), 0.0), ca_(o.ca_window, o.promotion_threshold), lines_(queries_.size()),
      done_(queries_.size(), 0), batch_(e.answerer(), o.batch) {}

void AnswerRun::skip(const Query& q, const Error& e) {
  if (o_.on_error != OnError::skip) throw Error(query_error(q, e));
  ++skipped_;
  std::fprintf(stderr, "ragkv: skipped %s\n", query_error(q, e).c_str());
}

// Retrieval (core/rag/retrieval-pipeline.h): by a worker thread ahead of the answering loop, which
// holds backend_turn while it computes (the worker embeds on the same backend in between); or, by
// default, the whole file first (a batch knows its queries up front).
void AnswerRun::retrieve_all() {
  if (o_.pipeline && o_.search_slice > 0 && e_.store() && !e_.store()->foreign())
    prefetch_ = std::make_unique<KvPrefetcher>(*e_.store());
  retrieval_ = std::make_unique<RetrievalPipeline>(e_.retriever(), queries_,
                                                   RetrievalPipelineOptions{o_.pipeline, o_.search_slice},
                                                   &backend_turn_, prefetch_.get(),
                                                   prefetch_ ? tree_load_plan(keys_, e_.format()) : LoadPlan{});
  if (o_.pipeline) return;
  const auto t0 = Clock::now();
  Progress rbar("answer: retrieve", int64_t(queries_.size()), "queries");
  retrieval_->run_all([&] { rbar.add(); });
  rbar.finish();
  retrieve_wall_ms_ = ms_since(t0);
}

void AnswerRun::fetch(size_t i) {
  if (fetched_[i]) return;
  fetched_[i] = 1;
  const double waited = retrieval_->waited_ms();
  try {
    contexts_[i] = retrieval_->wait(i);
    shapes_[i].path = {kPrefixChunkId};
    for (const Chunk* c : contexts_[i]->chunks) shapes_[i].path.push_back(c->id);
    shapes_[i].prompt_tokens = e_.answerer().prompt(contexts_[i]->chunks, queries_[i].question)->n_tokens();
  } catch (const Error& err) {
    contexts_[i].reset();
    wait_of_[i] = retrieval_->waited_ms() - waited;
    skip(queries_[i], err);
  }
  wait_of_[i] = retrieval_->waited_ms() - waited;
}

void AnswerRun::read_conversations() {
  for (const Query& q : queries_) {
    if (q.conversation.empty()) continue;
    Conversation& c = conversations_[q.conversation];
    if (c.last_turn && q.turn <= *c.last_turn)
      fail("{}:{}: query {}: turn {} of conversation {} follows turn {}: a conversation's turns must come in increasing order",
           q.source, q.line, q.id, q.turn, q.conversation, *c.last_turn);
    c.last_turn = q.turn;
    ++c.turns_left;
  }
  reorder_ = o_.reorder && conversations_.empty();
  if (o_.reorder && !conversations_.empty())
    std::fprintf(stderr, "ragkv: answer: %zu conversations: queries are answered in input order\n", conversations_.size());
  // Reordering orders retrieved queries: without the pipeline, the whole file at once; with it,
  // consecutive blocks of reorder_window queries (input order; 0: the whole file), each grouped and
  // then answered best-cached first once all of it is retrieved.
  const size_t n = queries_.size();
  block_ = !o_.pipeline ? n : !reorder_ ? 1 : o_.reorder_window == 0 ? n : o_.reorder_window;
}

// The next query to answer (core/rag/query-order.h), kNone when none is left, or (may_wait false)
// kNotReady while the next block is still being retrieved.
size_t AnswerRun::next_query(bool may_wait) {
  const size_t n = queries_.size();
  for (;;) {
    if (order_) {
      if (const std::optional<size_t> next = order_->next(e_.tiers() ? e_.tiers()->tree() : nullptr))
        return block_begin_ + *next;
      order_.reset();
    }
    if (block_end_ == n) return kNone;
    const size_t end = std::min(n, block_end_ + block_);
    if (!may_wait && !retrieval_->ready(end - 1)) return kNotReady;
    std::vector<QueryShape> block_shapes;
    for (size_t i = block_end_; i < end; ++i) {
      fetch(i);
      block_shapes.push_back(shapes_[i]);
    }
    block_begin_ = block_end_;
    block_end_ = end;
    order_.emplace(std::move(block_shapes), o_.reorder_window, reorder_, o_.mode.mode == ReuseMode::prefix);
  }
}

void AnswerRun::flush() {  // the answered queries at the head of the input order
  for (; written_ < queries_.size() && done_[written_]; ++written_)
    if (lines_[written_]) out_(*lines_[written_]), lines_[written_].reset();
}

void AnswerRun::finish_query(size_t qi) {
  done_[qi] = 1;
  if (!queries_[qi].conversation.empty()) {
    Conversation& c = conversations_.at(queries_[qi].conversation);
    c.in_flight = false;
    if (--c.turns_left == 0 && c.carried) {  // its last turn: the KV is no longer needed
      carried_bytes_ -= c.carried->bytes();
      c.carried.reset();
    }
  }
  contexts_[qi].reset();
  bar_->add();
  flush();
}

// A conversation turn's chunks (CRAFT §4.3: only those it adds, unless dedup is off) and the
// earlier turns its prompt carries.
std::vector<const Chunk*> AnswerRun::conversation_chunks(size_t qi, std::vector<const Chunk*> chunks,
                                                         AnswerOptions& opt) {
  const Query& q = queries_[qi];
  Conversation& c = conversations_.at(q.conversation);
  size_t dropped = 0;
  if (o_.dedup) {
    std::vector<const Chunk*> fresh;
    for (const Chunk* ch : chunks) {
      if (c.chunks.count(ch->id))
        ++dropped;
      else
        fresh.push_back(ch);
    }
    chunks = std::move(fresh);
    opt.promote.clear();
  }
  // The earliest turns leave the prompt when it would overflow the context (CRAFT §4.3: their
  // information lives on in the later answers that remain).
  opt.history = c.turns;
  const int64_t room = e_.model().config().n_ctx_train - o_.defaults.max_tokens;
  while (!opt.history.empty() && e_.answerer().prompt(chunks, q.question, opt.history)->n_tokens() > room)
    opt.history.erase(opt.history.begin());
  history_of_[qi] = opt.history.size();
  opt.carried = c.carried;
  opt.carry = c.turns_left > 1;
  deduplicated_of_[qi] = dropped;
  chunks_of_[qi] = chunks;
  return chunks;
}

void AnswerRun::admit(size_t qi) {
  const Query& q = queries_[qi];
  const RagContext& ctx = *contexts_[qi];
  AnswerOptions opt = e_.options(o_.defaults, o_.mode);
  apply_sampling(o_.sampling, opt.gen);
  opt.write_back = o_.write_back;
  opt.record_in_tiers = true;
  opt.load_control = e_.load_controller();
  opt.apply_load_control = o_.apply_load_control;
  opt.raise_ratio = o_.raise_ratio;
  opt.require_exact = o_.require_exact;
  opt.fallback = o_.fallback;
  // CRAFT §4: the CA-Table counts this request's chunks; the frequency order puts the most
  // accessed first; the CP-Tree admits a computed prefix only when its chunks reach the threshold.
  std::vector<std::string> ids;
  for (const Chunk* c : ctx.chunks) ids.push_back(c->id);
  ChunkAccessTable::Admission admission = ca_.admit(ids, o_.freq_order);
  std::vector<const Chunk*> chunks = permuted(ctx.chunks, admission.order);
  opt.promote = std::move(admission.promote);
  if (!q.conversation.empty()) chunks = conversation_chunks(qi, std::move(chunks), opt);
  // The comparison answer first (it does not touch the tiers): a failure leaves nothing in flight.
  if (o_.compare) {
    AnswerOptions co = e_.options(o_.defaults, compare_mode_);
    apply_sampling(o_.sampling, co.gen);
    co.history = opt.history;
    compared_[qi] = e_.answerer().answer(q.question, chunks, co);
  }
  batch_.admit(qi, q.question, chunks, opt);
  prompt_chunks_.emplace_back();
  for (const Chunk* ch : chunks) prompt_chunks_.back().push_back(ch->id);
  if (!q.conversation.empty()) {
    Conversation& c = conversations_.at(q.conversation);
    c.in_flight = true;
    for (const Chunk* ch : chunks) c.chunks.insert(ch->id);
  }
}

void AnswerRun::complete(size_t qi, AnswerRecord&& r) {
  const Query& q = queries_[qi];
  r.retrieval_ms = contexts_[qi]->retrieval_ms;
  r.mode = o_.mode.name();
  e_.record_variant_uses(r);
  tot_.written_back += r.written_back;
  if (r.write_back_failed > 0 && tot_.write_back_failed == 0)
    std::fprintf(stderr, "ragkv: warning: --write-back: a variant could not be stored (%s); answers are unaffected, "
                 "the failures are counted in the summary's variant_write_failures\n", r.write_back_error.c_str());
  tot_.write_back_failed += r.write_back_failed;
  tot_.output_tokens += double(r.output_ids.size());
  json m = r.metrics();
  m["retrieval_wait_ms"] = wait_of_[qi];  // the answering loop blocked on this query's retrieval
  json line = {{"id", q.id}, {"answer", r.answer}, {"mode", r.mode}, {"chunks", r.chunk_ids}};
  if (!q.conversation.empty()) {
    Conversation& c = conversations_.at(q.conversation);
    c.turns.push_back({chunks_of_.at(qi), q.question, r.answer});
    c.in_flight = false;
    if (c.carried) carried_bytes_ -= c.carried->bytes();
    c.carried.reset();
    if (r.carried && carried_bytes_ + r.carried->bytes() <= kCarriedKvBudget) {
      c.carried = std::move(r.carried);
      carried_bytes_ += c.carried->bytes();
    }
    line["conversation"] = q.conversation;
    line["turn"] = q.turn;
    m["history_turns"] = history_of_.at(qi);
    m["chunks_deduplicated"] = deduplicated_of_.at(qi);
    tot_.deduplicated += double(deduplicated_of_.at(qi));
  }
  tot_.add(r);
  const auto c = compared_.find(qi);
  AnsweredQuery a{q, r, c != compared_.end() && c->second ? &*c->second : nullptr, compare_mode_.name(),
                  std::move(line), std::move(m)};
  if (score_) score_(a);
  a.line["metrics"] = std::move(a.metrics);
  lines_[qi] = a.line.dump();
  if (c != compared_.end()) compared_.erase(c);
}

// The answering loop computes only while holding backend_turn; the time it waited for the turn is
// the worker's embedding that compute did not hide.
std::unique_lock<TurnLock> AnswerRun::compute_turn() {
  const auto t0 = Clock::now();
  std::unique_lock<TurnLock> turn(backend_turn_);
  turn_wait_ms_ += ms_since(t0);
  return turn;
}

// Continuous batching (core/rag/answer-batch.h): admit prompts while there is room — each
// prefilled at once, in answering order, so the tiers evolve as with one at a time — then one
// decode step.
void AnswerRun::answer_all() {
  bool more = true;
  size_t held = kNone;  // the next query, when it waits for its conversation
  while (more || !batch_.empty()) {
    while (more && batch_.can_admit()) {
      if (held == kNone) {
        // With answers in flight, a query still being retrieved does not stall them: decode on.
        const size_t next = next_query(batch_.empty());
        if (next == kNotReady) break;
        if (next == kNone) {
          more = false;
          break;
        }
        held = next;
      }
      const size_t qi = held;
      // A turn waits until its conversation's previous turn has its answer.
      if (!queries_[qi].conversation.empty() && conversations_.at(queries_[qi].conversation).in_flight) break;
      held = kNone;
      if (!contexts_[qi]) {  // skipped at retrieval
        finish_query(qi);
        continue;
      }
      answered_order_.push_back(qi);
      try {
        const auto turn = compute_turn();
        admit(qi);
      } catch (const Error& err) {
        compared_.erase(qi);
        skip(queries_[qi], err);
        finish_query(qi);
      }
    }
    if (batch_.empty()) continue;
    std::vector<std::pair<size_t, AnswerRecord>> finished;
    {
      const auto turn = compute_turn();
      finished = batch_.step();
    }
    for (auto& [qi, r] : finished) {
      try {
        complete(qi, std::move(r));
      } catch (const Error& err) {
        skip(queries_[qi], err);
      }
      finish_query(qi);
    }
  }
}

AnswerRunResult AnswerRun::run() {
  retrieve_all();
  read_conversations();
  bar_.emplace("answer", int64_t(queries_.size()), "queries");
  const auto t_answer = Clock::now();
  answer_all();
  const double answer_s = std::chrono::duration<double>(Clock::now() - t_answer).count();
  bar_->finish();
  flush();
  // The uses only order later evictions (f_r): a store this process cannot write (read-only media,
  // a shared cache mounted read-only) keeps every answer, with the uses left unrecorded.
  if (e_.ledger()) {
    try {
      e_.ledger()->flush();
    } catch (const Error& err) {
      std::fprintf(stderr, "ragkv: warning: variant uses (f_r) not recorded in the store: %s\n", err.what());
    }
  }
  if (e_.tiers() && e_.tiers()->write_failures() > 0)
    std::fprintf(stderr, "ragkv: warning: %zu knowledge-tree nodes could not be written to the store (first: %s); "
                 "answers are unaffected, those nodes stay in memory\n", e_.tiers()->write_failures(),
                 e_.tiers()->first_write_error().c_str());
  return {summary(answer_s), tot_.n, skipped_, tot_.bad};
}

json AnswerRun::summary(double answer_s) const {
  json s = {{"mode", o_.mode.name()}, {"skipped_lines", qf_.skipped.size()}, {"skipped_queries", skipped_}};
  s.update(tot_.to_json());
  if (o_.compare) s["compare"] = compare_mode_.name();
  s["reordered"] = reorder_;
  if (!conversations_.empty()) {
    s["conversations"] = conversations_.size();
    s["dedup"] = o_.dedup;
    s["chunks_deduplicated"] = tot_.deduplicated;
  }
  // Throughput of the answering phase (after retrieval; with the comparison's answers included).
  s["batch"] = o_.batch;
  s["answer_wall_s"] = answer_s;
  s["answers_per_s"] = answer_s > 0 ? json(double(tot_.n) / answer_s) : json(nullptr);
  s["output_tokens"] = tot_.output_tokens;
  s["mean_decode_batch"] =
      batch_.steps() > 0 ? json(double(batch_.sequence_steps()) / double(batch_.steps())) : json(nullptr);
  size_t moved = 0;
  for (size_t i = 0; i < answered_order_.size(); ++i)
    moved += i == 0 || answered_order_[i] != answered_order_[i - 1] + 1;
  s["order_runs"] = moved;  // maximal runs of consecutive input queries answered in sequence
  const ChunkOverlap overlap = chunk_overlap(prompt_chunks_);  // CRAFT §3, in answering and prompt order
  s["craft_prefix_overlap"] = overlap.prefix;
  s["craft_total_overlap"] = overlap.total;
  if (reorder_ && o_.pipeline) s["reorder_block"] = block_;
  s["search"] = search_summary();
  s["wall_s"] = retrieve_wall_ms_ / 1000.0 + answer_s;  // retrieval phase (without the pipeline) + answering
  if (e_.tiers() && e_.tiers()->tree()) s["cache_manager"] = cache_manager_summary();
  if (e_.store() && e_.store()->remote()) s["remote"] = e_.store()->remote()->stats().to_json();
  return s;
}

// Search time not hidden behind compute (RAGCache §7.4, Table 3's non-overlapping search time):
// without the pipeline, the whole retrieval phase; with it, the answering loop blocked on a
// query's retrieval plus its waits for the backend while the worker embedded.
json AnswerRun::search_summary() const {
  const RetrievalStats rs = retrieval_->stats();
  const double unhidden = o_.pipeline ? retrieval_->waited_ms() + turn_wait_ms_ : retrieve_wall_ms_;
  json search = {{"pipelined", o_.pipeline}, {"speculative", prefetch_ != nullptr},
                 {"slice", prefetch_ ? o_.search_slice : 0}, {"queries_searched", rs.searched},
                 {"search_ms", rs.search_ms}, {"embed_ms", rs.embed_ms}, {"hnsw_ms", rs.hnsw_ms},
                 {"retrieve_phase_ms", retrieve_wall_ms_}, {"unhidden_search_ms", unhidden},
                 {"unhidden_search_ms_per_query", tot_.n ? json(unhidden / double(tot_.n)) : json(nullptr)},
                 {"retrieval_wait_ms", retrieval_->waited_ms()}, {"answer_turn_wait_ms", turn_wait_ms_},
                 {"worker_turn_wait_ms", rs.turn_wait_ms}};
  if (prefetch_) {
    const KvPrefetchStats ps = prefetch_->stats();
    search["speculation"] = {{"speculations", rs.speculations}, {"restarts", rs.restarts},
                             {"tree_paths_started", rs.items_started}, {"tree_paths_wasted", rs.items_wasted},
                             {"loads_wanted", ps.wanted}, {"loads_started", ps.started}, {"loads_completed", ps.completed},
                             {"loads_missing", ps.missing}, {"loads_failed", ps.failed}, {"loads_dropped", ps.dropped},
                             {"loads_stopped", ps.stopped}, {"wasted_loads", ps.wasted_loads},
                             {"bytes_read", ps.bytes_read}, {"wasted_bytes", ps.wasted_bytes},
                             {"loader_busy_ms", ps.busy_ms}, {"speculate_ms", rs.speculate_ms}};
  }
  return search;
}

json AnswerRun::cache_manager_summary() const {
  const KnowledgeTree& t = *e_.tiers()->tree();
  json tiers = json::object();
  for (KvTier k : {KvTier::device, KvTier::host, KvTier::disk}) {
    const TierStats st = t.stats(k);
    tiers[kv_tier_name(k)] = {{"budget", st.budget}, {"bytes", st.bytes}, {"nodes", st.nodes}, {"placed", st.placed},
                              {"evicted", st.evicted}, {"swapped_out", st.swapped_out}, {"rejected", st.rejected}};
  }
  return {{"policy", cache_policy_name(t.policy())}, {"tiers", tiers}, {"bad_tree_files", e_.tiers()->bad_files()},
          {"tree_bytes_written", e_.tiers()->bytes_written()}, {"tree_write_failures", e_.tiers()->write_failures()}};
}

}  // namespace

AnswerRunResult run_answers(RagEngine& engine, const QueryFile& queries, const AnswerRunOptions& o,
                            const AnswerScorer& score, const std::function<void(const std::string&)>& out) {
  return AnswerRun(engine, queries, o, score, out).run();
}

}  // namespace ragkv
