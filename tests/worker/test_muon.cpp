// Muon as the inner optimizer (worker/training/optimizer.hpp, kernels/ops/newton_schulz.hpp): the
// Newton-Schulz iteration against its closed form on matrices of known SVD and its singular-value
// band on a random one, the choice of matrices, the step worked by hand, its state through a
// worker snapshot, and the config keys and their errors. (Against PyTorch:
// tests/models/test_gpt_parity.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/ops/newton_schulz.hpp"
#include "models/model_spec.hpp"
#include "tests/temp_dir.hpp"
#include "worker/config.hpp"
#include "worker/run/worker_checkpoint.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/optimizer.hpp"

using namespace geotrain;
using namespace geotrain::worker;

namespace {

using Matrix = std::vector<double>;  // row-major

// The quintic composed `steps` times on one normalised singular value: what Newton-Schulz does
// to each singular value of its input.
double quintic(double s, int steps) {
  const double a = kernels::cpu::kNewtonSchulzA, b = kernels::cpu::kNewtonSchulzB,
               c = kernels::cpu::kNewtonSchulzC;
  for (int i = 0; i < steps; ++i) s = a * s + b * s * s * s + c * s * s * s * s * s;
  return s;
}

Matrix multiply(const Matrix& x, const Matrix& y, size_t n, size_t k, size_t m) {
  Matrix out(n * m, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < m; ++j)
      for (size_t l = 0; l < k; ++l) out[i * m + j] += x[i * k + l] * y[l * m + j];
  return out;
}

Matrix transpose(const Matrix& x, size_t rows, size_t cols) {
  Matrix t(x.size());
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) t[j * rows + i] = x[i * cols + j];
  return t;
}

// The eigenvalues of a symmetric n x n matrix, by cyclic Jacobi rotations.
std::vector<double> symmetric_eigenvalues(Matrix a, size_t n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (size_t p = 0; p < n; ++p)
      for (size_t q = p + 1; q < n; ++q) off += a[p * n + q] * a[p * n + q];
    if (off < 1e-22) break;
    for (size_t p = 0; p < n; ++p)
      for (size_t q = p + 1; q < n; ++q) {
        if (std::abs(a[p * n + q]) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < n; ++k) {  // columns p, q
          const double kp = a[k * n + p], kq = a[k * n + q];
          a[k * n + p] = c * kp - s * kq;
          a[k * n + q] = s * kp + c * kq;
        }
        for (size_t k = 0; k < n; ++k) {  // rows p, q
          const double pk = a[p * n + k], qk = a[q * n + k];
          a[p * n + k] = c * pk - s * qk;
          a[q * n + k] = s * pk + c * qk;
        }
      }
  }
  std::vector<double> eig(n);
  for (size_t i = 0; i < n; ++i) eig[i] = a[i * n + i];
  std::sort(eig.begin(), eig.end());
  return eig;
}

// The singular values of a rows x cols matrix (rows <= cols), from the eigenvalues of X X^T.
std::vector<double> singular_values(const std::vector<float>& x, size_t rows, size_t cols) {
  const Matrix xd(x.begin(), x.end());
  auto eig = symmetric_eigenvalues(multiply(xd, transpose(xd, rows, cols), rows, cols, rows), rows);
  for (double& e : eig) e = std::sqrt(std::max(e, 0.0));
  return eig;
}

std::vector<float> newton_schulz(const Matrix& g, size_t rows, size_t cols, int steps = 5) {
  const std::vector<float> in(g.begin(), g.end());
  std::vector<float> out(in.size());
  kernels::cpu::newton_schulz5(in.data(), out.data(), rows, cols, steps);
  return out;
}

// A 2 x 3 matrix U [diag(s) 0] V^T: U a rotation by 0.3, V a rotation by 0.7 in the (0, 2) plane.
Matrix with_svd(double s0, double s1, const std::vector<double>& diag_out = {}) {
  const double cu = std::cos(0.3), su = std::sin(0.3), cv = std::cos(0.7), sv = std::sin(0.7);
  const Matrix u{cu, -su, su, cu};
  const Matrix vt{cv, 0, sv, 0, 1, 0, -sv, 0, cv};  // V^T (3 x 3)
  const double d0 = diag_out.empty() ? s0 : diag_out[0], d1 = diag_out.empty() ? s1 : diag_out[1];
  const Matrix sigma{d0, 0, 0, 0, d1, 0};
  return multiply(multiply(u, sigma, 2, 2, 3), vt, 2, 3, 3);
}

MatrixBlock block(const std::string& name, uint64_t offset, uint64_t rows, uint64_t cols) {
  return {name, offset, rows, cols};
}

}  // namespace

TEST_CASE("Newton-Schulz keeps the singular vectors and maps each singular value by the quintic") {
  // G = U [diag(3, 4) 0] V^T: ||G||_F = 5, so the iteration starts from singular values 0.6 and
  // 0.8 and ends at quintic^5 of them (0.7229, 1.1192), in the same singular vectors.
  const double norm = 5.0 + 1e-7;
  const std::vector<double> want_s{quintic(3 / norm, 5), quintic(4 / norm, 5)};
  CHECK(want_s[0] == doctest::Approx(0.72288).epsilon(1e-4));
  CHECK(want_s[1] == doctest::Approx(1.11920).epsilon(1e-4));
  const Matrix g = with_svd(3, 4), want = with_svd(0, 0, want_s);
  const auto wide = newton_schulz(g, 2, 3);
  for (size_t i = 0; i < want.size(); ++i) CHECK(wide[i] == doctest::Approx(want[i]).epsilon(1e-5));
  // A tall matrix runs on its transpose: NS(G^T) = NS(G)^T.
  const auto tall = newton_schulz(transpose(g, 2, 3), 3, 2);
  const Matrix want_t = transpose(want, 2, 3);
  for (size_t i = 0; i < want_t.size(); ++i)
    CHECK(tall[i] == doctest::Approx(want_t[i]).epsilon(1e-5));
  // One step is the quintic once; the output may overwrite the input.
  std::vector<float> inplace(g.begin(), g.end());
  kernels::cpu::newton_schulz5(inplace.data(), inplace.data(), 2, 3, 1);
  const Matrix one = with_svd(0, 0, {quintic(3 / norm, 1), quintic(4 / norm, 1)});
  for (size_t i = 0; i < one.size(); ++i)
    CHECK(inplace[i] == doctest::Approx(one[i]).epsilon(1e-5));
  CHECK_THROWS_AS(kernels::cpu::newton_schulz5(inplace.data(), inplace.data(), 2, 3, 0),
                  InputError);
}

TEST_CASE("a random 16 x 48 gradient comes out with every singular value in [0.67, 1.2]") {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  Matrix g(16 * 48);
  for (double& x : g) x = normal(rng);
  const std::vector<float> gf(g.begin(), g.end());
  const auto before = singular_values(gf, 16, 48);
  REQUIRE(before.back() / before.front() > 3);  // spread, so the band is the iteration's doing
  const auto out = newton_schulz(g, 16, 48);
  const auto s = singular_values(out, 16, 48);
  MESSAGE("singular values in [", s.front(), ", ", s.back(), "] from [", before.front(), ", ",
          before.back(), "]");
  CHECK(s.front() >= 0.67);
  CHECK(s.back() <= 1.2);
  // The same matrix stood up: the transpose of the same result.
  const auto tall = newton_schulz(transpose(g, 16, 48), 48, 16);
  const Matrix out_t = transpose(Matrix(out.begin(), out.end()), 16, 48);
  for (size_t i = 0; i < out_t.size(); ++i)
    CHECK(tall[i] == doctest::Approx(out_t[i]).epsilon(1e-5));
}

TEST_CASE("Muon takes the GPT's block matrices; embeddings, LayerNorms and biases stay AdamW") {
  models::ModelSpec spec;
  spec.kind = "gpt";
  spec.gpt = models::gpt_preset("gpt-tiny");
  const auto model = models::make_model(spec);
  const ParamTable table = model->make_table({});
  const auto matrices =
      muon_matrices(table, model->tensor_shapes(), OptimizerConfig::default_adamw_tensors());
  REQUIRE(matrices.size() == 4 * spec.gpt.layers);
  const std::vector<std::string> layer0{"h.0.attn.qkv.w", "h.0.attn.proj.w", "h.0.mlp.fc.w",
                                        "h.0.mlp.proj.w"};
  for (size_t i = 0; i < 4; ++i) CHECK(matrices[i].name == layer0[i]);
  const uint64_t d = spec.gpt.d_model;
  CHECK((matrices[0].rows == 3 * d && matrices[0].cols == d));
  CHECK((matrices[3].rows == d && matrices[3].cols == 4 * d));
  for (const auto& m : matrices) {
    const auto it = std::find_if(table.tensors().begin(), table.tensors().end(),
                                 [&](const TensorInfo& t) { return t.name == m.name; });
    REQUIRE(it != table.tensors().end());
    CHECK(it->offset == m.offset);
    CHECK(it->size == m.rows * m.cols);
  }
  // wte (the tied head) and wpe are 2-D but named by the defaults; without them they are Muon's.
  CHECK(muon_matrices(table, model->tensor_shapes(), {}).size() == 4 * spec.gpt.layers + 2);
  auto shapes = model->tensor_shapes();
  shapes.pop_back();
  CHECK_THROWS_WITH_AS(muon_matrices(table, shapes, {}), doctest::Contains("tensor shapes"),
                       InputError);
  shapes = model->tensor_shapes();
  shapes[0] = {1, 2};
  CHECK_THROWS_WITH_AS(muon_matrices(table, shapes, {}), doctest::Contains("tensor wte"),
                       InputError);
}

TEST_CASE("a Muon step: momentum, Nesterov, orthogonalised update scaled by sqrt(rows / cols)") {
  // Layout: b (2, AdamW) then W (4 x 2, Muon). W's gradient has orthogonal columns of norms 3
  // and 4, so the orthogonalised update is exact in closed form: the quintic on 0.6 and 0.8.
  const OptimizerConfig config{.kind = OptimizerKind::kMuon, .weight_decay = 0.5f};
  Optimizer opt(config, 10, {0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, {block("W", 2, 4, 2)});
  std::vector<float> p(10, 1.0f);
  std::vector<float> g{0.5f, -2.0f, 3, 0, 0, 4, 0, 0, 0, 0};
  const float lr = 0.01f, muon_lr = 0.1f;
  opt.step(p, g, lr, muon_lr);
  // b: AdamW's first step moves by lr * sign(g), no decay (mask 0).
  CHECK(p[0] == doctest::Approx(1.0 - 0.01).epsilon(1e-6));
  CHECK(p[1] == doctest::Approx(1.0 + 0.01).epsilon(1e-6));
  // W: M = 0.05 G, U = 0.05 G + 0.95 M = 0.0975 G, NS(U) = diag(q(0.6), q(0.8)) on top, x sqrt(2).
  const double scale = std::sqrt(2.0), decay = 1 - 0.1 * 0.5;
  const double q0 = quintic(0.6, 5) * scale, q1 = quintic(0.8, 5) * scale;
  const std::vector<double> want{
      decay - 0.1 * q0, decay, decay, decay - 0.1 * q1, decay, decay, decay, decay};
  for (size_t i = 0; i < 8; ++i) CHECK(p[2 + i] == doctest::Approx(want[i]).epsilon(1e-5));
  // The momentum buffer is the lerp: 0.05 G (and Adam's second moment is unused there).
  CHECK(opt.first_moment()[2] == doctest::Approx(0.05 * 3).epsilon(1e-6));
  CHECK(opt.first_moment()[5] == doctest::Approx(0.05 * 4).epsilon(1e-6));
  CHECK(opt.second_moment()[2] == 0.0f);
  CHECK(opt.second_moment()[0] == doctest::Approx(0.001 * 0.25).epsilon(1e-5));

  // Without Nesterov the update is the buffer itself: the same direction here, so the same step.
  OptimizerConfig plain_config = config;
  plain_config.muon_nesterov = false;
  Optimizer plain(plain_config, 10, {}, {block("W", 2, 4, 2)});
  std::vector<float> q(10, 1.0f);
  plain.step(q, g, lr, muon_lr);
  for (size_t i = 0; i < 8; ++i) CHECK(q[2 + i] == doctest::Approx(want[i]).epsilon(1e-5));

  // A refused learning rate changes nothing.
  const auto before = p;
  CHECK_THROWS_WITH_AS(opt.step(p, g, lr, 0.0f), doctest::Contains("matrices' lr 0"), InputError);
  CHECK(p == before);
  CHECK(opt.steps() == 1);
}

TEST_CASE("LocalStep steps Muon's matrices at muon_lr under the schedule's warmup") {
  // Warmup over 2 steps: the first step is at lr / 2, and the matrix at muon_lr / 2.
  const LocalStepConfig config{
      .optimizer = {.kind = OptimizerKind::kMuon, .muon_lr = 0.2f},
      .schedule = {.base_lr = 0.01f, .warmup_steps = 2},
      .guard = {.enabled = false},
      .muon_matrices = {block("W", 0, 2, 2)},
      .decay_mask = {},
  };
  LocalStep step(config, 5);
  std::vector<float> p(5, 0.0f);
  const std::vector<float> g{3, 0, 0, 4, 1};
  std::copy(g.begin(), g.end(), step.grad().begin());
  REQUIRE(step.add_micro_batch(1.0));
  const auto report = step.apply(p);
  CHECK(report.lr == doctest::Approx(0.005));
  CHECK(p[0] == doctest::Approx(-0.1 * quintic(0.6, 5)).epsilon(1e-5));
  CHECK(p[3] == doctest::Approx(-0.1 * quintic(0.8, 5)).epsilon(1e-5));
  CHECK(p[4] == doctest::Approx(-0.005).epsilon(1e-5));  // AdamW: lr * sign(g)
}

TEST_CASE("Muon's state goes through a worker snapshot and the run continues bit for bit") {
  const OptimizerConfig config{.kind = OptimizerKind::kMuon, .weight_decay = 0.1f};
  const std::vector<MatrixBlock> matrices{block("a", 3, 4, 6), block("b", 30, 5, 3)};
  const size_t n = 50;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&] {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  Optimizer running(config, n, {}, matrices);
  std::vector<float> p = random();
  for (int i = 0; i < 3; ++i) running.step(p, random(), 0.01f, 0.05f);

  test::TempDir dir("muon-snapshot");
  const WorkerCheckpointStore store(dir.path(), 2);
  WorkerCheckpointState s;
  s.region = "a";
  s.round = 3;
  s.identity = 99;
  s.params = p;
  s.optimizer_m.assign(running.first_moment().begin(), running.first_moment().end());
  s.optimizer_v.assign(running.second_moment().begin(), running.second_moment().end());
  s.optimizer_steps = running.steps();
  const auto loaded = store.load(store.write(s), 99);
  Optimizer resumed(config, n, {}, matrices);
  resumed.restore(loaded.optimizer_m, loaded.optimizer_v, loaded.optimizer_steps);
  std::vector<float> q = loaded.params;
  for (int i = 0; i < 3; ++i) {
    const auto g = random();
    running.step(p, g, 0.01f, 0.05f);
    resumed.step(q, g, 0.01f, 0.05f);
  }
  CHECK(q == p);
  CHECK(resumed.steps() == 6);
  // A snapshot of another shape of state is refused.
  CHECK_THROWS_AS(resumed.restore(std::vector<float>(n), std::vector<float>(), 1), InputError);
}

TEST_CASE("Muon's settings are checked: momentum, ns_steps, lr and the matrices") {
  const OptimizerConfig ok{.kind = OptimizerKind::kMuon};
  const std::vector<MatrixBlock> one{block("W", 0, 2, 2)};
  CHECK_NOTHROW(Optimizer(ok, 4, {}, one));
  CHECK_THROWS_WITH_AS(Optimizer(ok, 4), doctest::Contains("no 2-D weight matrix"), InputError);
  CHECK_THROWS_WITH_AS(Optimizer(ok, 3, {}, one), doctest::Contains("outside the 3 parameters"),
                       InputError);
  CHECK_THROWS_WITH_AS(Optimizer(ok, 8, {}, {block("A", 0, 2, 2), block("B", 3, 2, 2)}),
                       doctest::Contains("matrix B"), InputError);
  OptimizerConfig bad = ok;
  bad.muon_momentum = 1.0f;
  CHECK_THROWS_WITH_AS(Optimizer(bad, 4, {}, one), doctest::Contains("muon_momentum 1"),
                       InputError);
  bad = ok;
  bad.muon_ns_steps = 0;
  CHECK_THROWS_WITH_AS(Optimizer(bad, 4, {}, one), doctest::Contains("muon_ns_steps 0"),
                       InputError);
  // Other kinds ignore the matrices.
  CHECK_NOTHROW(Optimizer({.kind = OptimizerKind::kAdamW}, 4, {}, {block("W", 9, 9, 9)}));
  CHECK(parse_optimizer_kind("muon") == OptimizerKind::kMuon);
  CHECK(std::string(optimizer_kind_name(OptimizerKind::kMuon)) == "muon");
  CHECK_THROWS_WITH_AS(parse_optimizer_kind("lion"), doctest::Contains("sgd, adamw, muon"),
                       InputError);
}

TEST_CASE("worker.optimizer kind muon: its keys parse, other kinds' keys and device cuda fail") {
  const auto parse = [](const std::string& worker) {
    return parse_worker_config(
        "regions: [a]\nmodel: {kind: gpt, preset: gpt-tiny}\nworker: {data: {kind: text, path: "
        "/x}, " +
            worker + "}\n",
        "w.yaml");
  };
  const auto defaults = parse("optimizer: {kind: muon}").optimizer;
  CHECK(defaults.kind == OptimizerKind::kMuon);
  CHECK(defaults.muon_lr == 0.02f);
  CHECK(defaults.muon_momentum == 0.95f);
  CHECK(defaults.muon_nesterov);
  CHECK(defaults.muon_ns_steps == 5);
  CHECK(defaults.adamw_tensors == OptimizerConfig::default_adamw_tensors());
  const auto set =
      parse(
          "optimizer: {kind: muon, muon_lr: 0.05, muon_momentum: 0.9, muon_nesterov: false, "
          "muon_ns_steps: 3, adamw_tensors: [wte], beta2: 0.95, weight_decay: 0.1}")
          .optimizer;
  CHECK(set.muon_lr == 0.05f);
  CHECK(set.muon_momentum == 0.9f);
  CHECK_FALSE(set.muon_nesterov);
  CHECK(set.muon_ns_steps == 3);
  CHECK(set.adamw_tensors == std::vector<std::string>{"wte"});
  CHECK(set.beta2 == 0.95f);

  CHECK_THROWS_WITH_AS(parse("optimizer: {kind: muon, momentum: 0.9}"),
                       doctest::Contains("worker.optimizer.momentum is SGD's; with kind muon the "
                                         "matrices' is worker.optimizer.muon_momentum"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("optimizer: {kind: adamw, muon_lr: 0.02}"),
                       doctest::Contains("worker.optimizer.muon_lr is for kind muon (kind is "
                                         "adamw)"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("optimizer: {muon_ns_steps: 5}"), doctest::Contains("(kind is sgd)"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("optimizer: {kind: muon, muon_ns_steps: 0}"),
                       doctest::Contains("w.yaml: worker.optimizer.muon_ns_steps is 0"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("optimizer: {kind: muon, muon_momentum: 1}"),
                       doctest::Contains("worker.optimizer.muon_momentum is 1"), InputError);
  CHECK_THROWS_WITH_AS(parse("optimizer: {kind: muon, muon_lr: 0}"),
                       doctest::Contains("worker.optimizer.muon_lr is 0"), InputError);
  CHECK_THROWS_WITH_AS(parse("optimizer: {kind: lion}"),
                       doctest::Contains("worker.optimizer.kind is 'lion', allowed: adamw, muon, "
                                         "sgd"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("device: cuda, optimizer: {kind: muon}"),
                       doctest::Contains("worker.optimizer.kind muon runs on the CPU only "
                                         "(worker.device is cuda"),
                       InputError);
  // A snapshot of a Muon run is not one of an AdamW run, nor of another adamw_tensors.
  WorkerConfig a = parse("optimizer: {kind: muon}");
  WorkerConfig b = parse("optimizer: {kind: adamw}");
  WorkerConfig c = parse("optimizer: {kind: muon, adamw_tensors: [wte]}");
  CHECK(worker_identity(a, 1) != worker_identity(b, 1));
  CHECK(worker_identity(a, 1) != worker_identity(c, 1));
}
