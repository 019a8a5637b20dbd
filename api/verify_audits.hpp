// verify's model audits as library functions (`mosaic verify MODEL --per-node` and
// `--determinism`; docs/cli.md): which node diverges from the naive oracle, and whether a
// training step repeats bit for bit. The CLI prints their reports; Python gets them as dicts
// (mosaic.verify_per_node, mosaic.verify_determinism).
#pragma once

#include <string>
#include <vector>

#include "api/verify.hpp"
#include "ir/status.hpp"
#include "validate/determinism.hpp"
#include "validate/per_node.hpp"

namespace mosaic::api {

/// One backend's per-node comparison: the forward, and the backward of a training step where
/// the model ends in [N, classes] float32 logits (labels i % classes).
struct PerNodeAudit {
  std::string backend;
  PerNodeReport forward;
  bool has_backward = false;
  PerNodeReport backward;
  /// Why a model ending in logits had no backward audit: naive cannot train it (a quantised
  /// model's QuantizeLinear has no gradient). Empty otherwise.
  std::string backward_skipped;
};

struct PerNodeVerifyReport {
  std::string model;
  std::vector<PerNodeAudit> audits;  ///< one per backend, in order
  int ran = 0;                       ///< nodes that ran, over every backend (0: nothing was verified)
  bool agree = true;                 ///< no node left tolerance
};

/// o.paths holds one model (an ONNX file or zoo:NAME); its inputs are made up from o.common
/// (--batch, --seed, --input). Each node alone on each backend of o.backend against naive at
/// o.rtol / o.atol.
Expected<PerNodeVerifyReport> verify_per_node(const VerifyOptions& o);

struct DeterminismVerifyReport {
  std::string model;
  std::vector<DeterminismReport> audits;  ///< one per backend, in order
  int threads = 1;
  /// Every repeat bitwise identical: a finding otherwise, and a failure with o.deterministic
  /// (deterministic plans promise it).
  bool repeats = true;
};

/// One training step of the model (o.paths[0]) on each backend, three times on fresh plans:
/// twice at o.common.threads (default: all), once at 1 thread; with o.deterministic, plans
/// without timing-dependent work splits.
Expected<DeterminismVerifyReport> verify_determinism(const VerifyOptions& o);

/// The option combinations verify refuses whichever mode runs (per_node with determinism,
/// deterministic without determinism, junit with an audit).
Status check_verify_modes(const VerifyOptions& o);

}  // namespace mosaic::api
