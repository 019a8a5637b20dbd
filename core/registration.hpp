// How every backend registers its kernels: the built-ins (naive, im2col, onednn), the bundled
// plugins (torch, cuda) and external plugins alike. A backend is one function
//
//   Status register_mine(Registrar& registrar) {
//     BackendRegistration r(registrar, {"mine", "what it computes with", properties, nullptr});
//     add_conv_kernels(r);   // one add_<family>_kernels(BackendRegistration&) per kernel family
//     add_eltwise_kernels(r);
//     return r.status();
//   }
//
// which the built-in list calls with a registrar over the process's registry
// (backends/registry.cpp) and a plugin exports with MOSAIC_PLUGIN (backends/plugin.hpp), whose
// registrar collects everything on a copy and commits it only if all of it succeeded.
// Everything here is inline over Registrar's virtual functions, so a plugin links nothing of
// Mosaic's for it.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "core/kernel.hpp"
#include "ir/status.hpp"
#include "operators/schema.hpp"

namespace mosaic {

/// What a backend's registration function is handed. Each call returns an error for a
/// name already taken or a backend that does not exist; the first error ends the
/// registration (BackendRegistration keeps it), and a plugin whose registration failed
/// leaves nothing behind.
class Registrar {
 public:
  virtual ~Registrar() = default;
  /// A new backend, usable in --backends, --backend and --assign.
  virtual Status add_backend(BackendInfo info) = 0;
  /// A kernel for op_type on `backend`, which is a registered backend or one added through
  /// this registrar. op_type is an ONNX op or Mosaic's own (its key, Node::op_key, for another
  /// domain: "com.microsoft.QLinearAdd"), or one a plugin added with add_operator before: its
  /// kernel is then registered under that op's key, never ONNX's op of the same name. A kernel
  /// the backend already has is an error (registrations add, they do not replace). `traits`
  /// says which of the backend's layouts it reads and how the planner asks, before building
  /// it, whether it takes a node (KernelTraits in core/kernel.hpp).
  virtual Status add_kernel(const std::string& backend, const std::string& op_type, KernelFactory factory,
                            KernelTraits traits) = 0;
  Status add_kernel(const std::string& backend, const std::string& op_type, KernelFactory factory) {
    return add_kernel(backend, op_type, std::move(factory), KernelTraits{});
  }
  /// A custom operator (plugins only: the built-ins' schemas are operators/'). `schema.domain`
  /// must be set and not the ONNX domain ("" or "ai.onnx") nor Mosaic's ("mosaic"); the domain
  /// and op type must not be an op another plugin already has (ONNX's op of the same name is
  /// another op); `infer` and `flops` are required. Register its reference kernels on "naive"
  /// with add_kernel: naive is the oracle every other backend is checked against, and the
  /// backend that runs nodes no other backend has a kernel for.
  virtual Status add_operator(OpSchema schema) = 0;
  /// The registry plans are built from once this registration is committed: kernels that
  /// plan subgraphs on their own backend (If, Loop, Scan) keep it.
  virtual const KernelRegistry& registry() const = 0;
};

/// Registers straight into `registry`: the built-in list, and tests' own registries.
class DirectRegistrar final : public Registrar {
 public:
  explicit DirectRegistrar(KernelRegistry& registry) : registry_(registry) {}
  Status add_backend(BackendInfo info) override { return registry_.add_backend(std::move(info)); }
  using Registrar::add_kernel;
  Status add_kernel(const std::string& backend, const std::string& op_type, KernelFactory factory,
                    KernelTraits traits) override {
    return registry_.add(backend, op_type, std::move(factory), std::move(traits));
  }
  Status add_operator(OpSchema schema) override {
    return Status::invalid("operator " + schema.domain + "." + schema.op_type +
                           ": a built-in registration adds no operators (their schemas are in operators/; a plugin "
                           "adds its own through the plugin registrar)");
  }
  const KernelRegistry& registry() const override { return registry_; }

 private:
  KernelRegistry& registry_;
};

/// Runs a backend's registration function `fn` straight into `registry`.
inline Status register_backend(KernelRegistry& registry, const std::function<Status(Registrar&)>& fn) {
  DirectRegistrar direct(registry);
  return fn(direct);
}

/// One backend's kernels, registered in a chain: the first error (a duplicate, an unknown
/// backend) is kept, later calls do nothing, and status() returns it. Each kernel family of a
/// backend is a function `void add_<family>_kernels(BackendRegistration& r)`:
///
///   r.kernel("Conv", make_factory<MyConv>(), {LayoutUse::kNone, conv_supported})
///    .kernel("Relu", make_factory<MyRelu>());
class BackendRegistration {
 public:
  /// Rewrites each kernel before it is added (the naive oracle's element-type promotion,
  /// core/promote.hpp; the cuda backend's float32 check): set once, it applies to every later
  /// kernel() call.
  using Adapter = std::function<void(const std::string& op_type, KernelFactory& factory, KernelTraits& traits)>;

  /// Opens the new backend `info.name`.
  BackendRegistration(Registrar& registrar, BackendInfo info)
      : registrar_(registrar), name_(info.name), status_(registrar.add_backend(std::move(info))) {}
  /// Adds kernels to `backend`, registered before (a built-in or another plugin's): a plugin's
  /// reference kernels for its own operators on "naive".
  static BackendRegistration extend(Registrar& registrar, std::string backend) {
    return BackendRegistration(registrar, std::move(backend), Status::ok());
  }
  BackendRegistration(BackendRegistration&&) = default;

  BackendRegistration& adapt(Adapter adapter) {
    adapter_ = std::move(adapter);
    return *this;
  }
  BackendRegistration& kernel(const std::string& op_type, KernelFactory factory, KernelTraits traits = {}) {
    if (adapter_) adapter_(op_type, factory, traits);
    if (status_.is_ok()) status_ = registrar_.add_kernel(name_, op_type, std::move(factory), std::move(traits));
    return *this;
  }
  const std::string& name() const { return name_; }
  /// The registry plans are built from: kernels that plan subgraphs (If, Loop, Scan) keep it.
  const KernelRegistry& registry() const { return registrar_.registry(); }
  Status status() const { return status_; }

 private:
  BackendRegistration(Registrar& registrar, std::string backend, Status st)
      : registrar_(registrar), name_(std::move(backend)), status_(std::move(st)) {}

  Registrar& registrar_;
  std::string name_;
  Status status_;
  Adapter adapter_;
};

}  // namespace mosaic
