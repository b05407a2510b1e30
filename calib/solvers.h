// solvers.h: the two least-squares solvers the calibration fit (calib/fit.h) is built on.
//
// NonNegativeLeastSquares: min ‖A·x − b‖₂ subject to x ≥ 0, by Lawson and Hanson's active-set
// method (Solving Least Squares Problems, 1974, ch. 23) on Eigen's column-pivoting QR; Eigen 3.4
// has no NNLS of its own. O(iterations · m · n²) with at most 3n outer iterations; meant for the
// handful of columns of a linear cost-model term.
//
// MinimizeLeastSquares: min Σ rᵢ(x)² for a residual function, by Eigen's Levenberg–Marquardt
// (unsupported/Eigen/LevenbergMarquardt) with a central-difference Jacobian, so residuals with
// kinks (a max() roofline) need no hand-written derivatives. Each iteration costs 2n + 1
// residual evaluations. A local method: start it near the answer (the fit starts from a grid).
#pragma once

#include <Eigen/Dense>
#include <functional>

namespace feather::calib {

struct NnlsResult {
  Eigen::VectorXd x;         // ≥ 0 componentwise
  double residual_norm = 0;  // ‖A·x − b‖₂
  int iterations = 0;
  bool converged = true;  // false: the iteration limit stopped it (x is still feasible)
};
// Columns of A are scaled to unit norm internally (zero columns stay 0 in x).
[[nodiscard]] NnlsResult NonNegativeLeastSquares(const Eigen::MatrixXd& a,
                                                 const Eigen::VectorXd& b);

// Fills `residuals` (already sized to the residual count) for parameters `x`. Must be finite.
using ResidualFunction = std::function<void(const Eigen::VectorXd& x, Eigen::VectorXd& residuals)>;

struct LeastSquaresResult {
  Eigen::VectorXd x;
  double cost = 0;  // Σ rᵢ² at x
  int evaluations = 0;
  int status = 0;  // Eigen's LevenbergMarquardtSpace::Status
};
// Requires residual_count ≥ x0.size() ≥ 1 (else std::invalid_argument).
[[nodiscard]] LeastSquaresResult MinimizeLeastSquares(const ResidualFunction& residuals,
                                                      Eigen::Index residual_count,
                                                      const Eigen::VectorXd& x0);

}  // namespace feather::calib
