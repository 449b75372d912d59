// The runtime's non-fused kernels, random numbers and initializers on small cases whose
// answers are known in closed form or by a direct loop.
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "check.h"
#include "mdl/runtime.h"

namespace {

void reductions_over_each_axis_set() {
  const int64_t shape[3] = {2, 3, 4};
  std::vector<double> x(24);
  for (int i = 0; i < 24; ++i) x[i] = i;
  std::vector<double> out(24);
  mdl::reduce(mdl::Reduction::Sum, x.data(), shape, 3, 0b010, out.data());  // sum over the middle axis
  CHECK(out[0] == 0 + 4 + 8 && out[7] == 15 + 19 + 23);
  mdl::reduce(mdl::Reduction::Max, x.data(), shape, 3, 0b101, out.data());  // max over the outer axes
  CHECK(out[0] == 15 && out[2] == 23);
  mdl::reduce(mdl::Reduction::Mean, x.data(), shape, 3, 0b111, out.data());  // mean of everything
  CHECK(out[0] == 11.5);
  std::vector<double> big = {1000, 1000};  // logsumexp stays finite where exp overflows
  const int64_t pair[1] = {2};
  mdl::reduce(mdl::Reduction::LogSumExp, big.data(), pair, 1, 0b1, out.data());
  CHECK_NEAR(out[0], 1000 + std::log(2.0), 1e-12);
}

void softmax_and_cross_entropy() {
  std::vector<float> logits = {1, 2, 3, 1, 1, 1}, probs(6);
  mdl::softmax(false, logits.data(), 2, 3, 1, probs.data());
  CHECK_NEAR(probs[0] + probs[1] + probs[2], 1, 1e-6);
  CHECK_NEAR(probs[3], 1.0 / 3, 1e-6);
  std::vector<int32_t> targets = {2, 0};
  double expected = (std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3 + std::log(3.0)) / 2;
  float loss = -1;
  mdl::cross_entropy(logits.data(), targets.data(), nullptr, 2, 3, 1, "t", "n", &loss);
  CHECK_NEAR(loss, expected, 1e-6);
  // rows = T * B with B = 2: a length of 0 for the second sequence masks its row.
  std::vector<int32_t> lengths = {1, 0};
  mdl::cross_entropy(logits.data(), targets.data(), lengths.data(), 2, 3, 2, "t", "n", &loss);
  CHECK_NEAR(loss, std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3, 1e-6);
  // a length past T = 1 is refused, as a loop's is (it was read as 1)
  lengths = {2, 0};
  CHECK_THROWS(mdl::cross_entropy(logits.data(), targets.data(), lengths.data(), 2, 3, 2, "t",
                                  "n", &loss),
               mdl::ValueError);
  targets[0] = 3;
  CHECK_THROWS(mdl::cross_entropy(logits.data(), targets.data(), nullptr, 2, 3, 1, "t", "n",
                                  &loss),
               mdl::IndexError);
}

void softmax_far_from_zero_and_argmax() {
  std::vector<float> masked = {-1e9f, -1e9f, -1e9f, -1e9f}, probs(4);  // every score masked
  mdl::softmax(false, masked.data(), 1, 4, 1, probs.data());
  CHECK_NEAR(probs[0], 0.25, 1e-7);
  mdl::softmax(true, masked.data(), 1, 4, 1, probs.data());
  CHECK_NEAR(probs[3], -std::log(4.0), 1e-6);
  // [2, 3] laid out as [outer, n, inner]: along n (columns' index) and along inner (rows')
  std::vector<double> x = {1, 5, 5, 0, NAN, 7};
  std::vector<int32_t> out(3);
  mdl::argmax(x.data(), 2, 3, 1, out.data());
  CHECK(out[0] == 1 && out[1] == 1);  // the first of a tie; a NaN counts as the largest
  mdl::argmax(x.data(), 1, 2, 3, out.data());
  CHECK(out[0] == 0 && out[1] == 1 && out[2] == 1);
  mdl::argmax(x.data(), 2, 0, 1, out.data());  // no elements: no index
  CHECK(out[0] == -1 && out[1] == -1);
}

void topk_orders_as_argmax_picks() {
  // [2, 5] along n: ties keep their order, a NaN counts as the largest, -inf last
  std::vector<double> x = {3, 1, 3, 7, 3, -INFINITY, NAN, 2, NAN, INFINITY}, values(6);
  std::vector<int32_t> at(6);
  mdl::topk(x.data(), 2, 5, 1, 3, values.data(), at.data());
  CHECK(at[0] == 3 && at[1] == 0 && at[2] == 2);
  CHECK(values[0] == 7 && values[1] == 3 && values[2] == 3);
  CHECK(at[3] == 1 && at[4] == 3 && at[5] == 4);  // both NaNs, in order, then +inf
  CHECK(std::isnan(values[3]) && std::isnan(values[4]) && values[5] == INFINITY);
  // along the outer dim of [5, 2] (inner 2): each column's top 2, strided
  std::vector<int32_t> ints = {4, 0, 9, 0, 4, 5, 9, -7, 1, 5}, top(4), where(4);
  mdl::topk(ints.data(), 1, 5, 2, 2, top.data(), where.data());
  CHECK(top[0] == 9 && top[2] == 9 && where[0] == 1 && where[2] == 3);  // a tie: 1 before 3
  CHECK(top[1] == 5 && top[3] == 5 && where[1] == 2 && where[3] == 4);
}

void gather_checks_its_indices() {
  std::vector<float> table = {0, 1, 10, 11, 20, 21}, out(4);
  std::vector<int32_t> ids = {2, 0};
  mdl::gather(table.data(), 3, 2, ids.data(), 2, out.data(), "ids");
  CHECK(out[0] == 20 && out[1] == 21 && out[2] == 0 && out[3] == 1);
  ids[1] = 3;
  CHECK_THROWS(mdl::gather(table.data(), 3, 2, ids.data(), 2, out.data(), "ids"), mdl::IndexError);
}

void random_numbers_depend_only_on_key_and_counter() {
  CHECK(mdl::uniform01(7, 3) == mdl::uniform01(7, 3));
  CHECK(mdl::uniform01(7, 3) != mdl::uniform01(8, 3));
  double mean = 0;
  for (int i = 0; i < 100000; ++i) {
    double u = mdl::uniform01(1, i);
    CHECK(u >= 0 && u < 1);
    mean += u / 100000;
  }
  CHECK_NEAR(mean, 0.5, 0.01);
}

// A dropout drawn again from the position its stream had (codegen/ops/primitives/replay.py)
// gives the mask it drew, whatever the counter's high half and the key.
void a_replayed_dropout_draws_the_same_mask() {
  const uint64_t key = mdl::derive(0x9e3779b97f4a7c15ull, 5), first = (uint64_t(7) << 32) + 11;
  std::vector<float> x(37, 1.0f), drawn(37), again(37);
  mdl::dropout(true, x.data(), 37, 0.4, key, first, drawn.data());
  int32_t position[4], next[4];
  mdl::rng_position(first, key, position);
  mdl::dropout_replay(position, 37, 0.4, again.data());
  for (int i = 0; i < 37; ++i) CHECK(again[i] == drawn[i]);
  mdl::rng_skip(position, 37, next);
  CHECK(mdl::position_word(next, 0) == first + 37 && mdl::position_word(next, 1) == key);
  mdl::rng_skip(position, 37, position);  // in place
  CHECK(mdl::position_word(position, 0) == first + 37);
  mdl::dropout(true, x.data(), 5, 0.4, key, first + 37, drawn.data());
  mdl::dropout_replay(next, 5, 0.4, again.data());
  for (int i = 0; i < 5; ++i) CHECK(again[i] == drawn[i]);
}

void orthogonal_init_gives_orthonormal_rows() {
  std::vector<int64_t> shape = {3, 5};
  std::vector<double> w(15);
  mdl::initialize(w.data(), shape, mdl::InitSpec{"orthogonal"}, 42, 0);
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 3; ++s) {
      double dot = 0;
      for (int i = 0; i < 5; ++i) dot += w[r * 5 + i] * w[s * 5 + i];
      CHECK_NEAR(dot, r == s ? 1 : 0, 1e-12);
    }
  CHECK_THROWS(mdl::initialize(w.data(), shape, mdl::InitSpec{"nonsense"}, 42, 0), mdl::Error);
}

// Every divisor of [-3, 3] and the ends of i32, against floor division done in 64 bits.
void floor_division_and_remainder() {
  const int32_t lo = INT32_MIN, hi = INT32_MAX;
  const int32_t values[] = {lo, lo + 1, -7, -6, -1, 0, 1, 6, 7, hi - 1, hi};
  for (int32_t a : values)
    for (int32_t b : {-3, -2, -1, 0, 1, 2, 3, lo, hi}) {
      if (b == 0) {
        CHECK(mdl::floor_div(a, b) == 0 && mdl::floor_mod(a, b) == 0);
        continue;
      }
      int64_t q = int64_t(a) / b;
      if (q * b != a && ((a < 0) != (b < 0))) --q;
      CHECK(mdl::floor_div(a, b) == int32_t(uint32_t(uint64_t(q))));  // lo // -1 wraps
      CHECK(mdl::floor_mod(a, b) == int32_t(int64_t(a) - q * b));
    }
}

}  // namespace

int main() {
  floor_division_and_remainder();
  reductions_over_each_axis_set();
  softmax_and_cross_entropy();
  softmax_far_from_zero_and_argmax();
  topk_orders_as_argmax_picks();
  gather_checks_its_indices();
  random_numbers_depend_only_on_key_and_counter();
  a_replayed_dropout_draws_the_same_mask();
  orthogonal_init_gives_orthonormal_rows();
  return check::failures;
}
