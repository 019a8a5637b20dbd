#include "operators/einsum.hpp"

#include <cmath>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "ir/checked.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_einsum(const OpContext& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].dtype != c.inputs[0].dtype || c.inputs[i].dtype == DType::kBool)
      return Status::invalid(c.node->label() + ": operands must share one numeric type");
  MOSAIC_ASSIGN_OR_RETURN(EinsumParams p, einsum_params(c));
  return std::vector<TensorDesc>{{c.inputs[0].dtype, p.out}};
}

// One multiply-add per operand per point of the full label space.
double f_einsum(const OpContext& c) {
  auto p = einsum_params(c);
  if (!p.ok()) return 0;
  double points = 1;
  for (int64_t e : p->extent) points *= static_cast<double>(e);
  return 2.0 * points * static_cast<double>(c.inputs.size());
}

}  // namespace

Expected<EinsumParams> einsum_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  std::string eq = n.attr_string("equation", "");
  eq.erase(std::remove_if(eq.begin(), eq.end(), [](unsigned char ch) { return std::isspace(ch); }), eq.end());
  auto bad = [&](const std::string& why) { return Status::invalid(n.label() + ": equation '" + eq + "': " + why); };
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ctx.inputs.size())
    return bad(std::to_string(terms.size()) + " operands for " + std::to_string(ctx.inputs.size()) + " inputs");
  // The ellipsis's rank: the most axes any operand leaves to it.
  EinsumParams p;
  int64_t ell = 0;
  std::vector<int64_t> named(terms.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string& t = terms[i];
    const size_t dots = t.find("...");
    if (dots != std::string::npos && t.find("...", dots + 1) != std::string::npos) return bad("two ellipses in one operand");
    for (size_t k = 0; k < t.size(); ++k) {
      if (dots != std::string::npos && k >= dots && k < dots + 3) continue;
      if (!std::isalpha(static_cast<unsigned char>(t[k]))) return bad(std::string("label '") + t[k] + "' is not a letter");
      ++named[i];
    }
    const auto rank = static_cast<int64_t>(ctx.inputs[i].shape.size());
    if (dots == std::string::npos ? rank != named[i] : rank < named[i])
      return bad("operand " + std::to_string(i) + " has rank " + std::to_string(rank) + ", its term '" + t + "' " +
                 std::to_string(named[i]) + " labels");
    if (dots != std::string::npos) ell = std::max(ell, rank - named[i]);
  }
  // Labels: the ellipsis's axes 0..ell-1, then letters in order of appearance.
  std::map<char, int> label;
  p.extent.assign(static_cast<size_t>(ell), 1);
  std::map<char, int> uses;
  auto set_extent = [&](int l, int64_t e, size_t op) -> Status {
    int64_t& have = p.extent[static_cast<size_t>(l)];
    if (have == 1 || e == have) have = std::max(have, e);
    else if (e != 1) return bad("operand " + std::to_string(op) + " gives an axis " + std::to_string(e) + " where another has " +
                                std::to_string(have));
    return Status::ok();
  };
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string& t = terms[i];
    const Shape& s = ctx.inputs[i].shape;
    const auto rank = static_cast<int64_t>(s.size());
    std::vector<int> axes;
    int64_t axis = 0;
    for (size_t k = 0; k < t.size();) {
      if (t.compare(k, 3, "...") == 0) {
        const int64_t mine = rank - named[i];
        for (int64_t e = 0; e < mine; ++e, ++axis) {  // right-aligned within the ellipsis
          const int l = static_cast<int>(ell - mine + e);
          MOSAIC_RETURN_IF_ERROR(set_extent(l, s[static_cast<size_t>(axis)], i));
          axes.push_back(l);
        }
        k += 3;
        continue;
      }
      const char ch = t[k++];
      if (!label.count(ch)) {
        label[ch] = static_cast<int>(p.extent.size());
        p.extent.push_back(s[static_cast<size_t>(axis)]);
      } else if (p.extent[static_cast<size_t>(label[ch])] != s[static_cast<size_t>(axis)]) {
        return bad(std::string("label '") + ch + "' has extents " + std::to_string(p.extent[static_cast<size_t>(label[ch])]) +
                   " and " + std::to_string(s[static_cast<size_t>(axis)]));
      }
      ++uses[ch];
      axes.push_back(label[ch]);
      ++axis;
    }
    p.operand.push_back(axes);
  }
  for (int l = 0; l < ell; ++l) p.output.push_back(l);
  if (arrow == std::string::npos) {  // implicit: the ellipsis, then the labels used once, alphabetically
    for (const auto& [ch, count] : uses)
      if (count == 1) p.output.push_back(label[ch]);
  } else {
    p.output.clear();
    const std::string rhs = eq.substr(arrow + 2);
    for (size_t k = 0; k < rhs.size();) {  // the ellipsis's axes are summed over unless the output has it
      if (rhs.compare(k, 3, "...") == 0) {
        for (int l = 0; l < ell; ++l) p.output.push_back(l);
        k += 3;
        continue;
      }
      const char ch = rhs[k++];
      if (!label.count(ch)) return bad(std::string("output label '") + ch + "' is on no operand");
      if (std::count(p.output.begin(), p.output.end(), label[ch])) return bad(std::string("output label '") + ch + "' repeated");
      p.output.push_back(label[ch]);
    }
  }
  for (int l : p.output) p.out.push_back(p.extent[static_cast<size_t>(l)]);
  double points = 1;
  for (int64_t e : p.extent) points *= static_cast<double>(e);
  // The kernel visits every point of the label space once: four 1-D operands of 2^11 make
  // 2^44 points out of 32 KB of input, hours of loop. Refused beyond 2^32.
  if (points > 4294967296.0) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", points);
    return bad(std::string("the label space has ") + n + " points (the product of every label's extent), more than 2^32");
  }
  return p;
}

Expected<DetParams> det_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  if (!dtype_is_float(ctx.inputs[0].dtype))
    return Status::unsupported(n.label() + ": Det of " + dtype_name(ctx.inputs[0].dtype) + " (floating-point types)");
  if (x.size() < 2 || x[x.size() - 1] != x[x.size() - 2])
    return Status::invalid(n.label() + ": Det takes [..., M, M] square matrices, got " + shape_str(x));
  DetParams p;
  p.order = x.back();
  for (size_t d = 0; d + 2 < x.size(); ++d) p.matrices *= x[d];
  // Elimination is M^3 / 3 multiply-adds a matrix: refused past 2^40 of them.
  const double work = static_cast<double>(p.matrices) * std::pow(static_cast<double>(p.order), 3) / 3;
  if (work > 1099511627776.0) return Status::invalid(n.label() + ": " + shape_str(x) + " is more than 2^40 steps of elimination");
  return p;
}

double determinant_in_place(double* a, int64_t m) {
  double det = 1;
  for (int64_t k = 0; k < m; ++k) {
    int64_t pivot = k;
    for (int64_t i = k + 1; i < m; ++i)
      if (std::fabs(a[i * m + k]) > std::fabs(a[pivot * m + k])) pivot = i;
    if (a[pivot * m + k] == 0) return 0.0;
    if (pivot != k) {
      for (int64_t j = 0; j < m; ++j) std::swap(a[k * m + j], a[pivot * m + j]);
      det = -det;
    }
    const double d = a[k * m + k];
    det *= d;
    for (int64_t i = k + 1; i < m; ++i) {
      const double f = a[i * m + k] / d;
      for (int64_t j = k + 1; j < m; ++j) a[i * m + j] -= f * a[k * m + j];
    }
  }
  return det;
}

namespace {

Expected<std::vector<TensorDesc>> infer_det(const OpContext& c) {
  MOSAIC_ASSIGN_OR_RETURN(DetParams p, det_params(c));
  (void)p;
  const Shape& x = c.inputs[0].shape;
  return std::vector<TensorDesc>{{c.inputs[0].dtype, Shape(x.begin(), x.end() - 2)}};
}

// Elimination: about 2 M^3 / 3 operations a matrix.
double f_det(const OpContext& c) {
  auto p = det_params(c);
  if (!p.ok()) return 0;
  return 2.0 / 3.0 * static_cast<double>(p->matrices) * std::pow(static_cast<double>(p->order), 3);
}

}  // namespace

void add_einsum_schema(std::map<std::string, OpSchema>& table) {
  OpSchema& d = add_schema(table, "Det", 1, 1, infer_det, f_det, "the determinant of each trailing square matrix");
  d.backward_flops = nullptr;
  OpSchema& s = add_schema(table, "Einsum", 1, 1 << 10, infer_einsum, f_einsum,
                           "sum over the labels not in the output of the product of the operands (equation)");
  s.backward_flops = nullptr;
}

}  // namespace mosaic
