// solvers_test.cc: NNLS against a brute-force enumeration of active sets, and the
// Levenberg–Marquardt wrapper on a max() roofline started on the wrong side of its kink.
#include "calib/solvers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

namespace feather::calib {
namespace {

// The NNLS optimum by brute force: the best feasible unconstrained solution over every subset
// of columns (the KKT point of NNLS is the unconstrained optimum on its support).
Eigen::VectorXd BruteForceNnls(const Eigen::MatrixXd& a, const Eigen::VectorXd& b) {
  const auto n = a.cols();
  double best = std::numeric_limits<double>::infinity();
  Eigen::VectorXd best_x = Eigen::VectorXd::Zero(n);
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    std::vector<Eigen::Index> columns;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (mask & (1u << j)) columns.push_back(j);
    }
    Eigen::VectorXd x = Eigen::VectorXd::Zero(n);
    if (!columns.empty()) {
      Eigen::MatrixXd sub(a.rows(), static_cast<Eigen::Index>(columns.size()));
      for (size_t k = 0; k < columns.size(); ++k) {
        sub.col(static_cast<Eigen::Index>(k)) = a.col(columns[k]);
      }
      const Eigen::VectorXd z = sub.colPivHouseholderQr().solve(b);
      if ((z.array() < 0).any()) continue;
      for (size_t k = 0; k < columns.size(); ++k) x(columns[k]) = z(static_cast<Eigen::Index>(k));
    }
    const double r = (a * x - b).norm();
    if (r < best) {
      best = r;
      best_x = x;
    }
  }
  return best_x;
}

TEST(Nnls, MatchesBruteForceOnRandomSmallProblems) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  int clamped_problems = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Eigen::Index m = 3 + trial % 8, n = 1 + trial % 4;
    Eigen::MatrixXd a(m, n);
    Eigen::VectorXd b(m);
    for (Eigen::Index i = 0; i < m; ++i) {
      for (Eigen::Index j = 0; j < n; ++j)
        a(i, j) = normal(rng) * static_cast<double>(10 * (j + 1));  // scales differ
      b(i) = normal(rng);
    }
    const NnlsResult got = NonNegativeLeastSquares(a, b);
    const Eigen::VectorXd want = BruteForceNnls(a, b);
    ASSERT_TRUE(got.converged);
    EXPECT_TRUE((got.x.array() >= 0).all());
    EXPECT_NEAR(got.residual_norm, (a * want - b).norm(), 1e-9 * (1 + b.norm())) << trial;
    EXPECT_LT((got.x - want).norm(), 1e-7 * (1 + want.norm())) << trial;
    clamped_problems += (want.array() == 0).any() ? 1 : 0;
  }
  EXPECT_GT(clamped_problems, 50);  // the constraint mattered in many of them
}

TEST(Nnls, UnconstrainedOptimumZeroColumnAndBadSizes) {
  Eigen::MatrixXd a(3, 3);
  a << 1, 0, 0,  //
      0, 2, 0,   //
      0, 0, 0;   // the third column is zero
  Eigen::VectorXd b(3);
  b << 3, 4, 5;
  const NnlsResult r = NonNegativeLeastSquares(a, b);
  EXPECT_NEAR(r.x(0), 3, 1e-12);
  EXPECT_NEAR(r.x(1), 2, 1e-12);
  EXPECT_EQ(r.x(2), 0);
  EXPECT_NEAR(r.residual_norm, 5, 1e-12);
  EXPECT_THROW((void)NonNegativeLeastSquares(a, Eigen::VectorXd::Ones(2)), std::invalid_argument);
}

// y = max(A, B·x), relative residuals, parameters in log space. Started with the kink on the
// wrong side (too far left or right), LM moves it across; started where one side of the max()
// is active on no point, that side has no gradient and stays put — why the fit (calib/fit.cc)
// starts LM from the best point of a grid.
TEST(LevenbergMarquardt, FitsARooflineAcrossItsKink) {
  std::vector<double> xs, ys;
  for (double x = 1; x <= 64; x *= 1.25) {
    xs.push_back(x);
    ys.push_back(std::max(20.0, 1.5 * x));  // knee at x ≈ 13.3
  }
  const ResidualFunction residuals = [&](const Eigen::VectorXd& p, Eigen::VectorXd& r) {
    for (size_t i = 0; i < xs.size(); ++i) {
      const double predicted = std::max(std::exp(p(0)), std::exp(p(1)) * xs[i]);
      r(static_cast<Eigen::Index>(i)) = (predicted - ys[i]) / ys[i];
    }
  };
  for (const auto& [a0, b0] :
       {std::pair{5.0, 3.0}, std::pair{40.0, 1.0}, std::pair{10.0, 0.5}, std::pair{60.0, 1.0}}) {
    Eigen::VectorXd x0(2);
    x0 << std::log(a0), std::log(b0);
    const LeastSquaresResult fit =
        MinimizeLeastSquares(residuals, static_cast<Eigen::Index>(xs.size()), x0);
    EXPECT_NEAR(std::exp(fit.x(0)), 20, 1e-6) << a0 << " " << b0;
    EXPECT_NEAR(std::exp(fit.x(1)), 1.5, 1e-8) << a0 << " " << b0;
    EXPECT_LT(fit.cost, 1e-20);
    EXPECT_GT(fit.evaluations, 0);
  }
  Eigen::VectorXd stuck(2);
  stuck << std::log(200.0), std::log(0.1);  // 200 > 0.1·x for every x: B has no gradient
  const LeastSquaresResult fit =
      MinimizeLeastSquares(residuals, static_cast<Eigen::Index>(xs.size()), stuck);
  EXPECT_DOUBLE_EQ(std::exp(fit.x(1)), 0.1);
  EXPECT_GT(fit.cost, 1e-3);
}

TEST(LevenbergMarquardt, RejectsMoreParametersThanResiduals) {
  const ResidualFunction residuals = [](const Eigen::VectorXd&, Eigen::VectorXd& r) {
    r.setZero();
  };
  EXPECT_THROW((void)MinimizeLeastSquares(residuals, 1, Eigen::VectorXd::Zero(2)),
               std::invalid_argument);
  EXPECT_THROW((void)MinimizeLeastSquares(residuals, 3, Eigen::VectorXd()), std::invalid_argument);
}

}  // namespace
}  // namespace feather::calib
