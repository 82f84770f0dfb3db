// Answer-quality metrics: SQuAD normalisation, F1/EM, ROUGE-L, first-token KL and bootstrap
// intervals (DESIGN.md §6). The SQuAD parts follow the official v1.1 evaluate script line by line.
#include "core/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/util/error.h"

namespace ragkv {

namespace {

// Byte length of the whitespace character starting at s[i] (what Python's str.isspace() accepts),
// or 0 when s[i] does not start one.
size_t space_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned c = b(0);
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
  if (c == 0xC2 && (b(1) == 0x85 || b(1) == 0xA0)) return 2;  // U+0085, U+00A0
  if (c == 0xE1 && b(1) == 0x9A && b(2) == 0x80) return 3;    // U+1680
  if (c == 0xE2 && b(1) == 0x80) {                            // U+2000..U+200A, U+2028, U+2029, U+202F
    const unsigned d = b(2);
    return (d >= 0x80 && d <= 0x8A) || d == 0xA8 || d == 0xA9 || d == 0xAF ? 3 : 0;
  }
  if (c == 0xE2 && b(1) == 0x81 && b(2) == 0x9F) return 3;  // U+205F
  if (c == 0xE3 && b(1) == 0x80 && b(2) == 0x80) return 3;  // U+3000
  return 0;
}

// Python's string.punctuation.
bool is_ascii_punct(char c) {
  return std::string_view(R"(!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~)").find(c) != std::string_view::npos;
}

// Byte length of the character at s[i] when it is not a regex \w character, 0 when it is one:
// whitespace, ASCII other than letters, digits and '_', and the dashes, quotes and marks of
// General Punctuation (U+2010..U+2027, U+2030..U+203E). Any other non-ASCII character counts as
// \w (most are letters).
size_t non_word_len(std::string_view s, size_t i) {
  if (const size_t n = space_len(s, i)) return n;
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    const bool word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    return word ? 0 : 1;
  }
  if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80) {
    const auto d = static_cast<unsigned char>(s[i + 2]);
    if ((d >= 0x90 && d <= 0xA7) || (d >= 0xB0 && d <= 0xBE)) return 3;
  }
  return 0;
}

// re.sub(r'\b(a|an|the)\b', ' ', s): a maximal run of word characters that is an article
// becomes one space.
std::string remove_articles(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (const size_t n = non_word_len(s, i)) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    size_t end = i + 1;
    while (end < s.size() && non_word_len(s, end) == 0) ++end;
    const std::string_view run = s.substr(i, end - i);
    if (run == "a" || run == "an" || run == "the")
      out += ' ';
    else
      out.append(run);
    i = end;
  }
  return out;
}

// s.split(): the maximal runs between whitespace characters.
std::vector<std::string> split_whitespace(std::string_view s) {
  std::vector<std::string> tokens;
  std::string cur;
  for (size_t i = 0; i < s.size();) {
    if (const size_t n = space_len(s, i); n > 0) {
      if (!cur.empty()) tokens.push_back(std::move(cur));
      cur.clear();
      i += n;
    } else {
      cur += s[i++];
    }
  }
  if (!cur.empty()) tokens.push_back(std::move(cur));
  return tokens;
}

// log softmax(x) in double; `which` names the argument in errors.
std::vector<double> log_softmax(std::span<const float> x, const char* which) {
  double max = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || x[i] == std::numeric_limits<float>::infinity())
      fail("{} logit {} is {}, expected a finite value or -inf", which, i, x[i]);
    max = std::max(max, double(x[i]));
  }
  if (std::isinf(max)) fail("{} logits are all -inf", which);
  double sum = 0;
  for (float v : x) sum += std::exp(double(v) - max);
  const double lse = max + std::log(sum);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - lse;
  return out;
}

// Percentile of sorted values with linear interpolation between ranks (numpy's default).
double percentile(const std::vector<double>& sorted, double q) {
  const double pos = q * double(sorted.size() - 1);
  const size_t i = size_t(pos);
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (pos - double(i)) * (sorted[i + 1] - sorted[i]);
}

}  // namespace

std::string normalize_answer(std::string_view s) {
  std::string t;  // lower(), then remove_punc()
  for (char c : s) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (!is_ascii_punct(c)) t += c;
  }
  std::string out;  // white_space_fix()
  for (const std::string& tok : split_whitespace(remove_articles(t))) out += (out.empty() ? "" : " ") + tok;
  return out;
}

std::vector<std::string> answer_tokens(std::string_view s) { return split_whitespace(normalize_answer(s)); }

double token_f1(std::string_view pred, std::string_view gold) {
  std::vector<std::string> p = answer_tokens(pred), g = answer_tokens(gold);
  std::sort(p.begin(), p.end());
  std::sort(g.begin(), g.end());
  size_t same = 0;  // sum(Counter(p) & Counter(g)): a merge of the two sorted bags
  for (size_t i = 0, j = 0; i < p.size() && j < g.size();) {
    if (p[i] == g[j]) {
      ++same, ++i, ++j;
    } else if (p[i] < g[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  if (same == 0) return 0;
  const double precision = double(same) / double(p.size()), recall = double(same) / double(g.size());
  return 2 * precision * recall / (precision + recall);
}

double exact_match(std::string_view pred, std::string_view gold) {
  return normalize_answer(pred) == normalize_answer(gold) ? 1.0 : 0.0;
}

double max_over_golds(double (*metric)(std::string_view, std::string_view), std::string_view pred,
                      const std::vector<std::string>& golds) {
  double best = 0;
  for (const std::string& g : golds) best = std::max(best, metric(pred, g));
  return best;
}

double rouge_l_f1(std::string_view a, std::string_view b) {
  const std::vector<std::string> x = answer_tokens(a), y = answer_tokens(b);
  if (x.empty() && y.empty()) return 1.0;
  if (x.empty() || y.empty()) return 0.0;
  std::vector<size_t> prev(y.size() + 1, 0), cur(y.size() + 1, 0);  // LCS lengths, one row of the DP
  for (size_t i = 1; i <= x.size(); ++i) {
    for (size_t j = 1; j <= y.size(); ++j)
      cur[j] = x[i - 1] == y[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  const size_t lcs = prev[y.size()];
  if (lcs == 0) return 0.0;
  const double p = double(lcs) / double(x.size()), r = double(lcs) / double(y.size());
  return 2 * p * r / (p + r);
}

double kl_divergence_logits(std::span<const float> p_logits, std::span<const float> q_logits) {
  if (p_logits.size() != q_logits.size())
    fail("KL divergence: logit vectors differ in size ({} vs {})", p_logits.size(), q_logits.size());
  if (p_logits.empty()) fail("KL divergence: empty logit vectors");
  const std::vector<double> lp = log_softmax(p_logits, "P"), lq = log_softmax(q_logits, "Q");
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i)
    if (std::isfinite(lp[i])) kl += std::exp(lp[i]) * (lp[i] - lq[i]);  // P_i = 0 adds nothing
  return std::max(kl, 0.0);  // rounding can leave -1e-17 for equal distributions
}

MeanInterval bootstrap_mean(std::span<const double> x, int resamples, uint64_t seed) {
  if (resamples < 1) fail("bootstrap: resamples must be at least 1, got {}", resamples);
  MeanInterval r;
  if (x.empty()) return r;
  const size_t n = x.size();
  r.mean = std::accumulate(x.begin(), x.end(), 0.0) / double(n);
  std::mt19937_64 rng(seed);
  std::vector<double> means(static_cast<size_t>(resamples));
  for (double& m : means) {
    double sum = 0;
    for (size_t k = 0; k < n; ++k) sum += x[rng() % n];  // modulo bias ~n/2^64: negligible, portable
    m = sum / double(n);
  }
  std::sort(means.begin(), means.end());
  r.lo = percentile(means, 0.025);
  r.hi = percentile(means, 0.975);
  return r;
}

MeanInterval bootstrap_mean_difference(std::span<const double> a, std::span<const double> b, int resamples,
                                       uint64_t seed) {
  if (a.size() != b.size()) fail("paired bootstrap: samples differ in size ({} vs {})", a.size(), b.size());
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return bootstrap_mean(d, resamples, seed);
}

RecoveryInterval bootstrap_recovery(std::span<const double> damage_ref, std::span<const double> damage_mode,
                                    int resamples, uint64_t seed) {
  if (damage_ref.size() != damage_mode.size())
    fail("recovery: samples differ in size ({} vs {})", damage_ref.size(), damage_mode.size());
  if (resamples < 1) fail("bootstrap: resamples must be at least 1, got {}", resamples);
  RecoveryInterval r;
  const size_t n = damage_ref.size();
  const double ref = std::accumulate(damage_ref.begin(), damage_ref.end(), 0.0);
  if (n == 0 || !(ref > 0)) return r;
  r.defined = true;
  r.mean = 1.0 - std::accumulate(damage_mode.begin(), damage_mode.end(), 0.0) / ref;
  std::mt19937_64 rng(seed);
  std::vector<double> stats;
  stats.reserve(static_cast<size_t>(resamples));
  for (int s = 0; s < resamples; ++s) {
    double a = 0, b = 0;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = rng() % n;
      a += damage_ref[i];
      b += damage_mode[i];
    }
    if (a > 0) stats.push_back(1.0 - b / a);
  }
  if (stats.empty()) return r;
  std::sort(stats.begin(), stats.end());
  r.lo = percentile(stats, 0.025);
  r.hi = percentile(stats, 0.975);
  return r;
}

}  // namespace ragkv
