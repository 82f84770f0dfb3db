// Answer-quality metrics: SQuAD normalisation, F1 and EM as the official v1.1 script scores
// them, ROUGE-L on hand-computed LCS cases, first-token KL, and bootstrap intervals.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "core/eval/metrics.h"

namespace {

using ragkv::exact_match;
using ragkv::MeanInterval;
using ragkv::normalize_answer;
using ragkv::rouge_l_f1;
using ragkv::token_f1;

// Values 0, 0.37, 0.74, ... wrapped into [0, 1): a deterministic, non-constant sample.
std::vector<double> sample(size_t n) {
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = double((i * 37) % 100) / 100.0;
  return x;
}

double kl(const std::vector<float>& p, const std::vector<float>& q) { return ragkv::kl_divergence_logits(p, q); }

}  // namespace

TEST_CASE("qa metrics: SQuAD normalisation") {
  CHECK(normalize_answer("The Denver Broncos!") == "denver broncos");
  CHECK(normalize_answer("  A  an THE apple,\t the-end\n") == "apple theend");  // punctuation goes before articles
  CHECK(normalize_answer("the_cat (a) an.") == "thecat");
  CHECK(normalize_answer("Theater Anna atheist") == "theater anna atheist");  // only whole words
  CHECK(normalize_answer("Levi's Stadium") == "levis stadium");
  CHECK(normalize_answer("the\xC2\xA0"
                         "Caf\xC3\xA9\xE2\x80\x83"
                         "a") == "caf\xC3\xA9");                        // NBSP, EM SPACE split
  CHECK(normalize_answer("\xC3\x89T\xC3\x89") == "\xC3\x89t\xC3\x89");  // non-ASCII bytes are kept as they are
  CHECK(normalize_answer("!!! the ...") == "");
  CHECK(normalize_answer("\xE2\x80\x9CThe\xE2\x80\x9D \xE2\x80\x94the") ==
        "\xE2\x80\x9C \xE2\x80\x9D \xE2\x80\x94");  // “The” —the
  CHECK(ragkv::answer_tokens("The  Denver, Broncos") == std::vector<std::string>{"denver", "broncos"});
  CHECK(ragkv::answer_tokens("a the").empty());
}

TEST_CASE("qa metrics: token F1 and exact match follow the official SQuAD script") {
  CHECK(exact_match("The Denver Broncos!", "Denver Broncos") == 1.0);
  CHECK(exact_match("Denver", "Denver Broncos") == 0.0);
  CHECK(exact_match("the", "a") == 1.0);  // both normalise to "", and "" == ""
  CHECK(token_f1("Santa Clara, California", "Levi's Stadium") == 0.0);
  CHECK(token_f1("Denver Broncos", "The Denver Broncos!") == 1.0);
  CHECK(token_f1("Denver Broncos", "the Denver Broncos team") == doctest::Approx(0.8));  // P 1, R 2/3
  CHECK(token_f1("a cat cat cat", "cat dog") == doctest::Approx(0.4));  // multiplicity: 1 shared, P 1/3, R 1/2
  CHECK(token_f1("cat cat dog", "cat cat") == doctest::Approx(0.8));    // 2 shared, P 2/3, R 1
  CHECK(token_f1("the", "a") == 0.0);                                   // no shared token: 0, as the script
  CHECK(token_f1("", "Denver") == 0.0);

  const std::vector<std::string> golds = {"Santa Clara, California", "Levi's Stadium",
                                          "Levi's Stadium in the San Francisco Bay Area at Santa Clara, California."};
  CHECK(ragkv::max_over_golds(exact_match, "levis stadium", golds) == 1.0);
  CHECK(ragkv::max_over_golds(token_f1, "Santa Clara", golds) == doctest::Approx(0.8));  // P 1, R 2/3
  CHECK(ragkv::max_over_golds(token_f1, "anything", {}) == 0.0);
}

TEST_CASE("qa metrics: ROUGE-L on hand-computed LCS") {
  // [cat sat on mat] vs [cat lay on mat]: LCS "cat on mat" = 3, P = R = 3/4.
  CHECK(rouge_l_f1("the cat sat on the mat", "The cat lay on a mat.") == doctest::Approx(0.75));
  // [w x y z] vs [x z w]: LCS "x z" = 2, P = 1/2, R = 2/3, F = 4/7.
  CHECK(rouge_l_f1("w x y z", "x z w") == doctest::Approx(4.0 / 7.0));
  // Order matters, unlike token F1: [p q r] vs [r q p] share 3 tokens but LCS = 1.
  CHECK(rouge_l_f1("p q r", "r q p") == doctest::Approx(1.0 / 3.0));
  CHECK(token_f1("p q r", "r q p") == 1.0);
  CHECK(rouge_l_f1("Denver Broncos", "denver broncos!") == 1.0);
  CHECK(rouge_l_f1("", "the") == 1.0);  // both empty
  CHECK(rouge_l_f1("", "Denver") == 0.0);
  CHECK(rouge_l_f1("Denver", "") == 0.0);
  CHECK(rouge_l_f1("red", "blue") == 0.0);
}

TEST_CASE("qa metrics: KL divergence of logits") {
  const std::vector<float> p = {0.5f, -1.25f, 2.0f, 0.0f}, q = {1.0f, 0.25f, -0.5f, 3.0f};
  CHECK(kl(p, p) == 0.0);  // identical log-softmax, exactly
  // P = (1/2, 1/2), Q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3).
  CHECK(kl({0.0f, 0.0f}, {0.0f, float(std::log(3.0))}) == doctest::Approx(0.5 * std::log(4.0 / 3.0)).epsilon(1e-6));
  // Softmax ignores a constant added to every logit (shifts exact in float).
  std::vector<float> p_shift = p, q_shift = q;
  for (float& v : p_shift) v += 100.0f;
  for (float& v : q_shift) v -= 37.5f;
  const double d = kl(p, q);
  CHECK(d > 0.1);
  CHECK(kl(p_shift, q_shift) == doctest::Approx(d).epsilon(1e-12));
  CHECK(kl(q, p) != doctest::Approx(d));  // not symmetric
  // Large logits do not overflow.
  CHECK(kl({1000.0f, 0.0f}, {1000.0f, 0.0f}) == doctest::Approx(0.0));
  // A token P gives no mass to adds nothing; one Q gives no mass makes KL infinite.
  const float ninf = -INFINITY;
  CHECK(kl({ninf, 0.0f}, {0.0f, 0.0f}) == doctest::Approx(std::log(2.0)));
  CHECK(std::isinf(kl({0.0f, 0.0f}, {ninf, 0.0f})));

  CHECK_THROWS_AS(kl({1.0f}, {1.0f, 2.0f}), ragkv::Error);
  CHECK_THROWS_AS(kl({}, {}), ragkv::Error);
  CHECK_THROWS_AS(kl({NAN, 0.0f}, {0.0f, 0.0f}), ragkv::Error);
  CHECK_THROWS_AS(kl({ninf, ninf}, {0.0f, 0.0f}), ragkv::Error);
}

TEST_CASE("qa metrics: bootstrap interval of a mean") {
  const std::vector<double> small = sample(50), large = sample(2000);
  const MeanInterval a = ragkv::bootstrap_mean(small), b = ragkv::bootstrap_mean(large);
  CHECK(a.mean == doctest::Approx(0.485));
  CHECK(a.lo < a.mean);
  CHECK(a.mean < a.hi);
  CHECK(b.lo < b.mean);
  CHECK(b.mean < b.hi);
  CHECK(b.hi - b.lo < (a.hi - a.lo) / 3);  // ~1/sqrt(40) as wide
  // Width near the normal-theory 2 * 1.96 * sd / sqrt(n) (sd of 0, 0.01, ..., 0.99 is ~0.2887).
  CHECK(b.hi - b.lo == doctest::Approx(2 * 1.96 * 0.2887 / std::sqrt(2000.0)).epsilon(0.15));

  const MeanInterval again = ragkv::bootstrap_mean(small), other = ragkv::bootstrap_mean(small, 2000, 7);
  CHECK(again.lo == a.lo);
  CHECK(again.hi == a.hi);
  CHECK((other.lo != a.lo || other.hi != a.hi));
  CHECK(other.mean == a.mean);

  const MeanInterval none = ragkv::bootstrap_mean({});
  CHECK((none.mean == 0 && none.lo == 0 && none.hi == 0));
  const std::vector<double> constant(30, 0.25);
  const MeanInterval c = ragkv::bootstrap_mean(constant);
  CHECK((c.mean == 0.25 && c.lo == 0.25 && c.hi == 0.25));
  CHECK_THROWS_AS(ragkv::bootstrap_mean(small, 0), ragkv::Error);
}

TEST_CASE("qa metrics: paired bootstrap of a difference") {
  const std::vector<double> x = sample(200);
  const MeanInterval same = ragkv::bootstrap_mean_difference(x, x);
  CHECK(same.mean == 0.0);
  CHECK(same.lo == 0.0);
  CHECK(same.hi == 0.0);

  std::vector<double> better = x;
  for (double& v : better) v += 0.1;
  const MeanInterval d = ragkv::bootstrap_mean_difference(better, x);
  CHECK(d.mean == doctest::Approx(0.1));
  CHECK(d.lo == doctest::Approx(0.1));  // every pair differs by 0.1: no spread from pairing
  CHECK(d.hi == doctest::Approx(0.1));
  const MeanInterval unpaired = ragkv::bootstrap_mean(x);
  CHECK(unpaired.hi - unpaired.lo > 0.05);

  CHECK_THROWS_AS(ragkv::bootstrap_mean_difference(x, sample(10)), ragkv::Error);
}
