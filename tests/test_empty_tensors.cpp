// Zero-sized tensors through every op on every backend, forward and backward (issue 50): ONNX
// allows them (an empty Slice is legal, `x[:, 4:]` of a width-4 x), and a kernel that divides
// by a row length or builds a primitive on them must still return empty outputs, or decline
// by name, never crash. Each case of the op table (tests/test_backends.cpp) is run with its
// leading and then its trailing dimension set to 0 in every run-time input that has it.
#include <gtest/gtest.h>

#include <iostream>

#include "metrics/compare.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

/// The case with dimension `axis` (0: leading, -1: trailing) of its run-time inputs set to 0
/// where they have the first run-time input's size there; false when no input can be emptied.
bool emptied(const OpCase& c, int axis, OpCase* out) {
  *out = c;
  out->label = c.label + (axis == 0 ? "/leading_0" : "/trailing_0");
  auto runtime = [&](size_t i) { return c.inputs[i].defined() && !(i < c.is_const.size() && c.is_const[i]); };
  int64_t size = -1;
  size_t rank = 0;
  for (size_t i = 0; i < c.inputs.size() && size < 0; ++i)
    if (runtime(i) && c.inputs[i].rank() > 0 && c.inputs[i].dtype() == DType::kF32) {
      rank = c.inputs[i].rank();
      size = c.inputs[i].dim(axis == 0 ? 0 : rank - 1);
    }
  if (size <= 0) return false;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!runtime(i) || c.inputs[i].rank() == 0) continue;
    Shape s = c.inputs[i].shape();
    const size_t d = axis == 0 ? 0 : s.size() - 1;
    if ((axis == 0 && s.size() != rank) || s[d] != size) continue;
    s[d] = 0;
    out->inputs[i] = Tensor::empty({c.inputs[i].dtype(), s});
  }
  return true;
}

std::vector<OpCase> empty_cases() {
  std::vector<OpCase> v;
  for (const OpCase& c : forward_op_cases())
    for (int axis : {0, -1}) {
      OpCase e;
      if (emptied(c, axis, &e)) v.push_back(std::move(e));
    }
  return v;
}

std::vector<Tensor> runtime_inputs(const OpCase& c) {
  std::vector<Tensor> r;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].defined() && !(i < c.is_const.size() && c.is_const[i])) r.push_back(c.inputs[i]);
  return r;
}

/// Forward (an inference plan) and backward (a training plan, where the op has a gradient) of
/// `c` on `backend`: outputs into `out`, the inputs' and parameters' gradients (from an
/// all-ones output gradient) into `grads`. kUnsupported: declined.
Status run_both(const OpCase& c, const std::string& backend, std::vector<Tensor>* out, std::vector<Tensor>* grads) {
  Graph g = make_graph(c);
  auto pr = prepare_graph(g, builtin_registry(), PrepareOptions{});
  if (!pr.ok()) return pr.status();
  auto inference = Plan::build(g, Placement::all_on(backend, {}), builtin_registry());
  if (!inference.ok()) return inference.status();
  MOSAIC_RETURN_IF_ERROR(inference.value()->run(runtime_inputs(c), out));
  PlanOptions po;
  po.training = true;
  po.input_grads = true;
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
  if (!plan.ok()) return Status::ok();  // no gradient (comparisons, Cast, Shape, ...)
  std::vector<Tensor> y;
  MOSAIC_RETURN_IF_ERROR(plan.value()->run(runtime_inputs(c), &y));
  std::vector<Tensor> dy;
  for (const Tensor& t : y) {
    Tensor d = Tensor::empty(t.desc());
    if (d.dtype() == DType::kF32)
      for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] = 1.f;
    dy.push_back(d);
  }
  MOSAIC_RETURN_IF_ERROR(plan.value()->backward(dy));
  for (const auto& p : plan.value()->parameters()) grads->push_back(p.grad.clone());
  for (size_t i = 0; i < plan.value()->graph().inputs.size(); ++i) {
    const Tensor* t = plan.value()->input_grad(i);
    grads->push_back(t && t->defined() ? t->clone() : Tensor());
  }
  return Status::ok();
}

class EmptyTensors : public ::testing::TestWithParam<std::string> {};

TEST_P(EmptyTensors, EveryOpTakesZeroSizedInputs) {
  const std::string backend = GetParam();
  const std::vector<OpCase> all = empty_cases();
  ASSERT_GT(all.size(), 200u);
  int ran = 0, declined = 0, not_valid = 0, empty_outputs = 0;
  std::vector<std::string> refused, declines;
  for (const OpCase& c : all) {
    SCOPED_TRACE(c.label + " on " + backend);
    std::vector<Tensor> ref, ref_grads;
    const Status naive = run_both(c, "naive", &ref, &ref_grads);
    if (!naive.is_ok()) {
      // A shape the op itself rejects (an empty axis to reduce into ArgMax, a Conv whose
      // channels do not match the weights any more): invalid input, named, never a crash.
      EXPECT_FALSE(naive.message().empty());
      refused.push_back(c.label + ": " + naive.message());
      ++not_valid;
      continue;
    }
    if (backend == "naive") {
      ++ran;
      for (const Tensor& y : ref) empty_outputs += y.numel() == 0;
      continue;
    }
    std::vector<Tensor> got, grads;
    const Status st = run_both(c, backend, &got, &grads);
    if (st.code() == StatusCode::kUnsupported) {
      EXPECT_FALSE(st.message().empty());
      ++declined;
      declines.push_back(c.label);
      continue;
    }
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) continue;
    ++ran;
    EXPECT_EQ(got.size(), ref.size());
    if (got.size() != ref.size()) continue;
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[i].shape(), ref[i].shape()) << "output " << i;
      if (got[i].shape() != ref[i].shape()) continue;
      if (ref[i].dtype() == DType::kF32 && ref[i].numel()) {
        const Agreement a = compare_tensors(got[i], ref[i], 1e-4, 1e-5);
        EXPECT_TRUE(a.ok) << "output " << i << ": " << a.message;
      }
    }
    if (grads.size() == ref_grads.size())
      for (size_t i = 0; i < grads.size(); ++i) {
        if (!grads[i].defined() || !ref_grads[i].defined() || !ref_grads[i].numel()) continue;
        const Agreement a = compare_tensors(grads[i], ref_grads[i], 1e-4, 1e-5);
        EXPECT_TRUE(a.ok) << "gradient " << i << ": " << a.message;
      }
  }
  std::cout << "[ reach    ] " << backend << ": " << ran << " of " << all.size() << " empty cases ran, " << declined
            << " declined, " << not_valid << " refused as invalid by the op itself"
            << (declines.empty() ? "" : "; declined: " + join(declines)) << "\n";
  if (backend == "naive") {
    for (const std::string& r : refused) std::cout << "[ refused  ] " << r << "\n";
    // Most variants are legal ONNX and run; those refused name the node.
    EXPECT_GT(ran, static_cast<int>(all.size()) * 3 / 4);
    EXPECT_GT(empty_outputs, ran / 2);
  }
}

std::vector<std::string> every_backend() {
  std::vector<std::string> all{"naive"};
  for (const std::string& b : optimised_backends()) all.push_back(b);
  return all;
}

TEST(EmptySequence, RecurrentOpsOverZeroStepsReturnTheirInitialStates) {
  // ONNX allows a sequence of 0 steps: Y is empty, Y_h and Y_c are the initial states (by
  // hand: nothing ran), and backward hands dY_h and dY_c to them with zero weight gradients.
  // Before, every backend refused the node ("empty sequence, batch or hidden size").
  for (const std::string op : {"LSTM", "GRU", "RNN"}) {
    const int64_t gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1, H = 4;
    OpCase c;
    c.label = op + "_0_steps";
    c.node = make_node(op, {{"hidden_size", Attribute::of_int(H)}});
    const bool lstm = op == "LSTM";
    c.node.outputs = lstm ? std::vector<std::string>{"y", "yh", "yc"} : std::vector<std::string>{"y", "yh"};
    const Tensor h0 = random_tensor({1, 2, H}, 3), c0 = random_tensor({1, 2, H}, 4);
    c.inputs = {Tensor::empty({DType::kF32, {0, 2, 3}}), random_tensor({1, gates * H, 3}, 1),
                random_tensor({1, gates * H, H}, 2), Tensor(), Tensor(), h0};
    c.is_const = {false, true, true, false, false, false};
    if (lstm) c.inputs.push_back(c0), c.is_const.push_back(false);
    for (const std::string& backend : every_backend()) {
      SCOPED_TRACE(op + " on " + backend);
      std::vector<Tensor> out, grads;
      const Status st = run_both(c, backend, &out, &grads);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      ASSERT_EQ(out.size(), lstm ? 3u : 2u);
      EXPECT_EQ(out[0].shape(), (Shape{0, 1, 2, H}));
      for (int64_t i = 0; i < h0.numel(); ++i) EXPECT_EQ(out[1].f32()[i], h0.f32()[i]) << i;
      if (lstm) {
        for (int64_t i = 0; i < c0.numel(); ++i) EXPECT_EQ(out[2].f32()[i], c0.f32()[i]) << i;
      }
      // Parameters W, R (all zero), then the inputs X (empty), initial_h, initial_c: all ones.
      ASSERT_EQ(grads.size(), lstm ? 5u : 4u);
      for (size_t k = 0; k < 2; ++k)
        for (int64_t i = 0; i < grads[k].numel(); ++i) EXPECT_EQ(grads[k].f32()[i], 0.f) << "parameter " << k;
      for (size_t k = 3; k < grads.size(); ++k) {
        ASSERT_TRUE(grads[k].defined()) << "input " << k - 2;
        for (int64_t i = 0; i < grads[k].numel(); ++i) EXPECT_EQ(grads[k].f32()[i], 1.f) << "input " << k - 2;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, EmptyTensors, ::testing::ValuesIn(every_backend()), backend_param_name);

}  // namespace
}  // namespace mosaic::test
