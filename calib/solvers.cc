// solvers.cc: Lawson–Hanson NNLS and a Levenberg–Marquardt wrapper (see solvers.h).
#include "calib/solvers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unsupported/Eigen/LevenbergMarquardt>
#include <vector>

namespace feather::calib {
namespace {

// Least squares of A restricted to the columns in `passive`; other entries 0.
Eigen::VectorXd SolvePassive(const Eigen::MatrixXd& a, const Eigen::VectorXd& b,
                             const std::vector<bool>& passive) {
  std::vector<Eigen::Index> columns;
  for (Eigen::Index j = 0; j < a.cols(); ++j) {
    if (passive[static_cast<size_t>(j)]) columns.push_back(j);
  }
  Eigen::MatrixXd sub(a.rows(), static_cast<Eigen::Index>(columns.size()));
  for (size_t k = 0; k < columns.size(); ++k) {
    sub.col(static_cast<Eigen::Index>(k)) = a.col(columns[k]);
  }
  const Eigen::VectorXd z = sub.colPivHouseholderQr().solve(b);
  Eigen::VectorXd full = Eigen::VectorXd::Zero(a.cols());
  for (size_t k = 0; k < columns.size(); ++k) full(columns[k]) = z(static_cast<Eigen::Index>(k));
  return full;
}

class CentralDifferenceFunctor : public Eigen::DenseFunctor<double> {
 public:
  CentralDifferenceFunctor(const ResidualFunction& residuals, int inputs, int values)
      : Eigen::DenseFunctor<double>(inputs, values), residuals_(residuals) {}

  int operator()(const InputType& x, ValueType& fvec) const {
    fvec.resize(values());
    residuals_(x, fvec);
    ++evaluations_;
    return 0;
  }

  // Returns the number of residual evaluations, as Eigen's NumericalDiff does.
  int df(const InputType& x, JacobianType& jacobian) const {
    jacobian.resize(values(), inputs());
    ValueType plus(values()), minus(values());
    InputType probe = x;
    for (int j = 0; j < inputs(); ++j) {
      const double h = 1e-6 * std::max(1.0, std::abs(x(j)));
      probe(j) = x(j) + h;
      residuals_(probe, plus);
      probe(j) = x(j) - h;
      residuals_(probe, minus);
      probe(j) = x(j);
      jacobian.col(j) = (plus - minus) / (2 * h);
    }
    evaluations_ += 2 * inputs();
    return 2 * inputs();
  }

  [[nodiscard]] int evaluations() const { return evaluations_; }

 private:
  const ResidualFunction& residuals_;
  mutable int evaluations_ = 0;
};

}  // namespace

NnlsResult NonNegativeLeastSquares(const Eigen::MatrixXd& a_in, const Eigen::VectorXd& b) {
  if (a_in.rows() != b.size()) {
    throw std::invalid_argument("NNLS: A has " + std::to_string(a_in.rows()) + " rows but b has " +
                                std::to_string(b.size()));
  }
  const Eigen::Index n = a_in.cols();
  Eigen::VectorXd scale = Eigen::VectorXd::Ones(n);
  Eigen::MatrixXd a = a_in;
  for (Eigen::Index j = 0; j < n; ++j) {
    const double norm = a.col(j).norm();
    if (norm > 0) {
      scale(j) = norm;
      a.col(j) /= norm;
    }
  }
  NnlsResult result;
  Eigen::VectorXd x = Eigen::VectorXd::Zero(n);
  std::vector<bool> passive(static_cast<size_t>(n), false);
  const double tolerance =
      10 * std::numeric_limits<double>::epsilon() * static_cast<double>(std::max(a.rows(), n)) *
      std::max(1.0, a.cwiseAbs().colwise().sum().maxCoeff()) * std::max(1.0, b.norm());
  const int max_iterations = 3 * static_cast<int>(n) + 3;
  Eigen::VectorXd w = a.transpose() * (b - a * x);
  while (true) {
    // The most promising column not yet free to move.
    Eigen::Index best = -1;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (!passive[static_cast<size_t>(j)] && w(j) > tolerance && (best < 0 || w(j) > w(best))) {
        best = j;
      }
    }
    if (best < 0) break;
    if (result.iterations++ >= max_iterations) {
      result.converged = false;
      break;
    }
    passive[static_cast<size_t>(best)] = true;
    while (true) {
      Eigen::VectorXd z = SolvePassive(a, b, passive);
      bool feasible = true;
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<size_t>(j)] && z(j) <= 0) feasible = false;
      }
      if (feasible) {
        x = z;
        break;
      }
      // Step from x towards z as far as feasibility allows, then drop the columns that hit 0.
      double alpha = 1;
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<size_t>(j)] && z(j) <= 0) {
          alpha = std::min(alpha, x(j) / (x(j) - z(j)));
        }
      }
      x += alpha * (z - x);
      bool dropped = false;
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<size_t>(j)] && x(j) <= tolerance) {
          passive[static_cast<size_t>(j)] = false;
          x(j) = 0;
          dropped = true;
        }
      }
      if (!dropped) break;  // numerical safety: no progress possible
    }
    w = a.transpose() * (b - a * x);
  }
  result.residual_norm = (a * x - b).norm();
  result.x = x.cwiseQuotient(scale);
  return result;
}

LeastSquaresResult MinimizeLeastSquares(const ResidualFunction& residuals,
                                        Eigen::Index residual_count, const Eigen::VectorXd& x0) {
  if (x0.size() < 1 || residual_count < x0.size()) {
    throw std::invalid_argument("least squares needs at least as many residuals (" +
                                std::to_string(residual_count) + ") as parameters (" +
                                std::to_string(x0.size()) + "), and one parameter");
  }
  CentralDifferenceFunctor functor(residuals, static_cast<int>(x0.size()),
                                   static_cast<int>(residual_count));
  Eigen::LevenbergMarquardt<CentralDifferenceFunctor> lm(functor);
  lm.setXtol(1e-12);
  lm.setFtol(1e-12);
  lm.setMaxfev(400 * (x0.size() + 1));
  LeastSquaresResult result;
  result.x = x0;
  result.status = static_cast<int>(lm.minimize(result.x));
  Eigen::VectorXd r(residual_count);
  residuals(result.x, r);
  result.cost = r.squaredNorm();
  result.evaluations = functor.evaluations();
  return result;
}

}  // namespace feather::calib
