// Scores of the selection methods: KV deviation on the backend (row_sq_dist), question attention
// through the attention op's per-segment mass with one segment per key row, random draws.
#include "core/rag/selection.h"

#include <random>

#include "core/util/error.h"

namespace ragkv {

Selection default_selection(const ModelConfig&) { return Selection::prophet; }

bool needs_deviation(Selection s) {
  return s == Selection::kv || s == Selection::v || s == Selection::head_v || s == Selection::sink_v ||
         s == Selection::question_v;
}

bool needs_question(Selection s) { return s == Selection::question || s == Selection::question_v; }

namespace {

// Scratch on the device for a check layer's scores: the active rows of ws.attn, which the layer's
// attention writes afresh after the checks (no allocation per check: on a GPU a cudaMalloc and a
// cudaFree, with its stream syncs, each time). floats values at most, one column.
Tensor check_scratch(const CheckLayerState& st, int64_t floats) {
  const int64_t na = int64_t(st.active.size());
  const Tensor attn = st.ws.attn.slice_rows(0, na);
  if (floats > attn.numel()) fail("internal: {} scores for a check scratch of {} values", floats, attn.numel());
  return attn.reshape(attn.numel(), 1).slice_rows(0, floats);
}

// dist[i] = ‖a[i] − b[rows[i]]‖² over the backend, downloaded.
std::vector<float> row_distances(const CheckLayerState& st, const Tensor& a, const Tensor& cached,
                                 std::span<const int32_t> rows) {
  Backend& b = st.model.backend();
  const int64_t n = int64_t(rows.size());
  std::vector<float> d(size_t(n), 0.f);
  if (n == 0) return d;
  const Tensor out = check_scratch(st, n);
  b.row_sq_dist(a, cached, rows, out);
  b.download(out, d.data());
  return d;
}

// Σ_h ‖ΔV_h‖² / mean over the candidates of ‖ΔV_h‖²: a head whose values are large everywhere
// does not drown the others.
std::vector<float> head_normalised_v(const CheckLayerState& st, const std::vector<uint8_t>& candidate) {
  const ModelConfig& c = st.model.config();
  const int H = c.n_head_kv, d = c.head_dim;
  const int64_t na = int64_t(st.active.size());
  std::vector<int32_t> rows(size_t(na) * H);
  for (int64_t i = 0; i < na; ++i)
    for (int h = 0; h < H; ++h) rows[size_t(i) * H + h] = st.active[size_t(i)] * H + h;
  const Tensor a = st.ws.v.slice_rows(0, na).reshape(na * H, d);
  const Tensor cached = st.kv.v[st.layer].reshape(st.kv.v[st.layer].rows * H, d);
  const std::vector<float> per_head = row_distances(st, a, cached, rows);
  std::vector<double> mean(size_t(H), 0.0);
  int64_t n_cand = 0;
  for (int64_t i = 0; i < na; ++i) {
    if (!candidate[size_t(st.active[size_t(i)])]) continue;
    ++n_cand;
    for (int h = 0; h < H; ++h) mean[size_t(h)] += per_head[size_t(i) * H + h];
  }
  for (double& m : mean) m = n_cand > 0 && m > 0 ? m / double(n_cand) : 1.0;
  std::vector<float> s(size_t(na), 0.f);
  for (int64_t i = 0; i < na; ++i)
    for (int h = 0; h < H; ++h) s[size_t(i)] += float(per_head[size_t(i) * H + h] / mean[size_t(h)]);
  return s;
}

// Divides v by its mean over the candidate rows (so two scores of different units can be added).
void normalise_by_candidate_mean(std::vector<float>& v, std::span<const int32_t> active,
                                 const std::vector<uint8_t>& candidate) {
  double sum = 0;
  int64_t n = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (candidate[size_t(active[i])]) sum += v[i], ++n;
  const double mean = n > 0 ? sum / double(n) : 0.0;
  if (mean <= 0) return;
  for (float& x : v) x = float(x / mean);
}

}  // namespace

std::vector<float> deviation_scores(Selection s, const CheckLayerState& st, const std::vector<uint8_t>& candidate) {
  if (!needs_deviation(s)) return {};
  if (s == Selection::head_v) return head_normalised_v(st, candidate);
  const int64_t na = int64_t(st.active.size());
  std::vector<float> dv = row_distances(st, st.ws.v.slice_rows(0, na), st.kv.v[st.layer], st.active);
  if (s == Selection::kv) {
    const std::vector<float> dk = row_distances(st, st.ws.k.slice_rows(0, na), st.kv.k[st.layer], st.active);
    for (size_t i = 0; i < dv.size(); ++i) dv[i] += dk[i];
  }
  return dv;
}

namespace {

// Where the question's rows start among the active rows (they are the last ones).
int64_t first_question_row(const CheckLayerState& st) {
  const int64_t na = int64_t(st.active.size());
  int64_t first_q = na;
  while (first_q > 0 && st.active[size_t(first_q - 1)] >= st.question_begin) --first_q;
  if (first_q == na) fail("internal: no question rows among the active rows of layer {}", st.layer);
  return first_q;
}

}  // namespace

SegmentMass question_attention_request(const CheckLayerState& st, std::vector<float>& total) {
  SegmentMass mass;  // each key row's probability, Σ over the question's rows and heads
  mass.key_totals = true;
  mass.deferred = true;
  mass.out = &total;
  mass.first_query = first_question_row(st);
  return mass;
}

std::vector<float> question_attention(const CheckLayerState& st) {
  const ModelConfig& c = st.model.config();
  Backend& b = st.model.backend();
  const int64_t first_q = first_question_row(st), nq = int64_t(st.active.size()) - first_q;
  std::vector<float> total;
  SegmentMass mass;  // each key row's probability, Σ over the question's rows and heads
  mass.key_totals = true;
  mass.out = &total;
  const Tensor out = st.ws.attn.slice_rows(first_q, nq);  // rewritten by the layer's attention after the checks
  b.attention(st.ws.q.slice_rows(first_q, nq), st.active.subspan(size_t(first_q)), st.kv.k[st.layer],
              st.kv.v[st.layer], std::span(st.kv.pos).first(size_t(st.n_kv)), st.n_kv, c.attention(st.layer), out,
              &mass);
  return total;
}

std::vector<float> question_scores(Selection s, const CheckLayerState& st) {
  if (!needs_question(s)) return {};
  const std::vector<float> mass = question_attention(st);
  std::vector<float> out(st.active.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = mass[size_t(st.active[i])];
  return out;
}

std::vector<float> selection_scores(Selection s, const CheckLayerState& st, const std::vector<uint8_t>& candidate,
                                    std::vector<float> deviation, std::vector<float> question, uint64_t seed) {
  switch (s) {
    case Selection::kv:
    case Selection::v:
    case Selection::head_v:
    case Selection::sink_v:
      return deviation;
    case Selection::question:
      return question;
    case Selection::question_v:
      normalise_by_candidate_mean(deviation, st.active, candidate);
      normalise_by_candidate_mean(question, st.active, candidate);
      for (size_t i = 0; i < deviation.size(); ++i) deviation[i] += question[i];
      return deviation;
    case Selection::random: {
      std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ULL * uint64_t(st.layer + 1)));
      std::uniform_real_distribution<float> u(0.f, 1.f);
      std::vector<float> r(st.active.size());
      for (float& x : r) x = u(rng);
      return r;
    }
    case Selection::sink:
    case Selection::prophet:
      break;
  }
  fail("internal: selection {} scores nothing on check layers", selection_name(s));
}

}  // namespace ragkv
