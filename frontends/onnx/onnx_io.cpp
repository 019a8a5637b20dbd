#include "frontends/onnx/onnx_io.hpp"

#include "ir/elements.hpp"

#include "frontends/onnx/onnx_functions.hpp"

#include <onnx/onnx_pb.h>

#include "ir/checked.hpp"
#include "ir/file_io.hpp"
#include "operators/onnx_versions.hpp"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace mosaic {

namespace fs = std::filesystem;

Expected<std::string> read_model_bytes(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::not_found(path + ": no such file");
  if (fs::is_directory(path, ec)) return Status::invalid(path + ": is a directory, expected a file");
  // A FIFO or device would block or never end: only regular files are read.
  if (!fs::is_regular_file(path, ec)) return Status::invalid(path + ": is not a regular file");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Status::io_error(path + ": cannot open");
  // One buffer of the file's size (a model's weights can be most of the machine's memory).
  const std::streamoff size = f.tellg();
  if (size < 0) return Status::io_error(path + ": cannot read");
  std::string bytes(static_cast<size_t>(size), '\0');
  f.seekg(0);
  if (size && !f.read(bytes.data(), size)) return Status::io_error(path + ": read failed");
  return bytes;
}

namespace {

/// A non-negative decimal integer, all of it (external data's offset and length).
Expected<int64_t> parse_count(const std::string& text, const std::string& what) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < 0)
    return Status::invalid(what + " is '" + text.substr(0, 40) + "', expected a non-negative integer");
  return v;
}

/// Resolves an external-data location against the model's folder, as ONNX Runtime and the
/// onnx package do since CVE-2022-25882 and CVE-2024-27318: the location must be relative,
/// name a regular file, and stay inside the folder after every symlink is resolved.
Expected<std::string> external_data_file(const std::string& base_dir, const std::string& location,
                                         const std::string& what) {
  const std::string shown = "'" + location.substr(0, 200) + "'";
  if (location.find('\0') != std::string::npos)
    return Status::invalid(what + ": external data location contains a NUL byte");
  const fs::path loc(location);
  if (loc.is_absolute() || loc.has_root_name() || loc.has_root_directory())
    return Status::invalid(what + ": external data location " + shown +
                           " is an absolute path; it must be relative to the model's folder");
  for (const auto& part : loc)
    if (part == "..")
      return Status::invalid(what + ": external data location " + shown + " leaves the model's folder ('..')");
  std::error_code ec;
  const fs::path dir = fs::canonical(base_dir.empty() ? fs::path(".") : fs::path(base_dir), ec);
  if (ec) return Status::io_error(what + ": cannot resolve the model's folder '" + base_dir + "': " + ec.message());
  const fs::path joined = dir / loc;
  if (!fs::exists(joined, ec))
    return Status::not_found(what + ": external data file " + joined.string() + " not found");
  const fs::path real = fs::canonical(joined, ec);
  if (ec) return Status::io_error(what + ": cannot resolve external data file " + joined.string() + ": " + ec.message());
  // Inside the folder: the resolved path starts with the folder's, component by component.
  auto r = real.begin();
  for (auto d = dir.begin(); d != dir.end(); ++d, ++r)
    if (r == real.end() || *r != *d)
      return Status::invalid(what + ": external data location " + shown + " resolves to " + real.string() +
                             ", outside the model's folder " + dir.string() + " (a symlink?)");
  if (!fs::is_regular_file(real, ec))
    return Status::invalid(what + ": external data location " + shown + " is not a regular file");
  return real.string();
}

Expected<DType> dtype_from_onnx(int32_t t, const std::string& what) {
  const DType d = dtype_of_onnx(t);
  if (d == DType::kCount)
    return Status::unsupported(what + " has element type " + onnx_type_name(t) +
                               "; Mosaic supports every numeric type (float4e2m1 to float64, int2 to int64, "
                               "uint2 to uint64) and bool");
  return d;
}

int32_t dtype_to_onnx(DType d) { return onnx_code_of(d); }

/// Converts a TensorProto (inline or external data) to a Tensor.
Expected<Tensor> tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir, const std::string& what) {
  MOSAIC_ASSIGN_OR_RETURN(DType dt, dtype_from_onnx(p.data_type(), what));
  Shape shape(p.dims().begin(), p.dims().end());
  // Sizes are checked before anything is allocated: a hostile model may declare dims whose
  // product wraps around (docs/architecture.md, "Sizes").
  MOSAIC_RETURN_IF_ERROR(check_shape(shape, dt, what));
  const int64_t n = shape_numel(shape);
  // Bytes in the file: the 4- and 2-bit types are packed there (checked by check_shape).
  const int64_t src_bytes = dtype_file_bytes(dt, n);
  const bool packed = dtype_packed_bits(dt) != 0;
  std::string external;
  const std::string* raw = nullptr;  // the proto's own bytes, or the external file's
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : p.external_data()) {
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset") {
        MOSAIC_ASSIGN_OR_RETURN(offset, parse_count(kv.value(), what + ": external data offset"));
      } else if (kv.key() == "length") {
        MOSAIC_ASSIGN_OR_RETURN(length, parse_count(kv.value(), what + ": external data length"));
      }
    }
    if (location.empty()) return Status::invalid(what + ": external data without a location");
    MOSAIC_ASSIGN_OR_RETURN(std::string file, external_data_file(base_dir, location, what));
    // Every number is checked against the tensor and the file before a byte is allocated.
    if (length >= 0 && length != src_bytes)
      return Status::invalid(what + ": external data length is " + std::to_string(length) + " bytes, the tensor " +
                             shape_str(shape) + " needs " + std::to_string(src_bytes));
    std::error_code ec;
    const auto file_size = fs::file_size(file, ec);
    if (ec) return Status::io_error(what + ": cannot stat external data file " + file + ": " + ec.message());
    int64_t end = 0;
    if (!checked_add(offset, src_bytes, &end) || end > static_cast<int64_t>(file_size))
      return Status::invalid(what + ": external data file " + file + " has " + std::to_string(file_size) +
                             " bytes, shorter than offset " + std::to_string(offset) + " + length " +
                             std::to_string(src_bytes));
    std::ifstream f(file, std::ios::binary);
    if (!f) return Status::io_error(what + ": cannot open external data file " + file);
    external.resize(static_cast<size_t>(src_bytes));
    f.seekg(offset);
    f.read(external.data(), src_bytes);
    if (f.gcount() != src_bytes)
      return Status::io_error(what + ": external data file " + file + " is shorter than offset+length");
    raw = &external;
  } else if (p.has_raw_data()) {
    raw = &p.raw_data();
  }
  if (raw && raw->size() != static_cast<size_t>(src_bytes))
    return Status::invalid(what + ": raw data has " + std::to_string(raw->size()) + " bytes, the tensor " +
                           shape_str(shape) + " needs " + std::to_string(src_bytes));
  if (!raw) {
    // Typed fields (onnx.proto says which holds which type): the count must match before
    // the tensor is allocated.
    int64_t have = 0;
    switch (p.data_type()) {
      case onnx::TensorProto::FLOAT: have = p.float_data_size(); break;
      case onnx::TensorProto::DOUBLE: have = p.double_data_size(); break;
      case onnx::TensorProto::INT64: have = p.int64_data_size(); break;
      case onnx::TensorProto::UINT32:
      case onnx::TensorProto::UINT64: have = p.uint64_data_size(); break;
      default: have = p.int32_data_size();  // the other integers, bool, and float16/bfloat16 as bits
    }
    // The packed types hold one packed byte per int32 (onnx.proto).
    const int64_t need = packed ? src_bytes : n;
    if (have != need)
      return Status::invalid(what + ": has " + std::to_string(have) + " values, shape " + shape_str(shape) + " needs " +
                             std::to_string(need) + (packed ? std::string(" (") + dtype_name(dt) + ", packed)" : ""));
  }
  Tensor t = Tensor::empty({dt, shape});
  if (packed) {
    std::vector<uint8_t> bytes(static_cast<size_t>(src_bytes));
    for (int64_t k = 0; k < src_bytes; ++k)
      bytes[static_cast<size_t>(k)] =
          raw ? static_cast<uint8_t>((*raw)[static_cast<size_t>(k)]) : static_cast<uint8_t>(p.int32_data(static_cast<int>(k)));
    unpack_elements(dt, bytes.data(), n, t.data());
    return t;
  }
  if (raw) {
    if (n) std::memcpy(t.data(), raw->data(), raw->size());  // little-endian, as the host
    return t;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i);
    switch (p.data_type()) {
      case onnx::TensorProto::FLOAT: t.f32()[i] = p.float_data(k); break;
      case onnx::TensorProto::DOUBLE: static_cast<double*>(t.data())[i] = p.double_data(k); break;
      case onnx::TensorProto::INT64: t.i64()[i] = p.int64_data(k); break;
      case onnx::TensorProto::UINT32:
      case onnx::TensorProto::UINT64: store_i64(dt, t.data(), i, static_cast<int64_t>(p.uint64_data(k))); break;
      case onnx::TensorProto::FLOAT16:
      case onnx::TensorProto::BFLOAT16:
        static_cast<uint16_t*>(t.data())[i] = static_cast<uint16_t>(p.int32_data(k));
        break;
      default:
        if (dtype_is_small_float(dt)) {  // the 8-bit floats' bits, one per int32
          static_cast<uint8_t*>(t.data())[i] = static_cast<uint8_t>(p.int32_data(k));
        } else {
          store_i64(dt, t.data(), i, p.int32_data(k));  // wraps as the narrow type's bits
        }
    }
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->set_name(name);
  p->set_data_type(dtype_to_onnx(t.dtype()));
  for (auto d : t.shape()) p->add_dims(d);
  if (dtype_packed_bits(t.dtype())) {
    const std::vector<uint8_t> packed = pack_elements(t.dtype(), t.data(), t.numel());
    p->set_raw_data(std::string(packed.begin(), packed.end()));
    return;
  }
  p->set_raw_data(std::string(static_cast<const char*>(t.data()), t.bytes()));
}

Expected<ValueInfo> value_info_from_proto(const onnx::ValueInfoProto& v, const std::string& file) {
  ValueInfo info;
  info.name = v.name();
  if (!v.type().has_tensor_type())
    return Status::unsupported(file + ": value '" + v.name() + "' is not a tensor");
  const auto& tt = v.type().tensor_type();
  MOSAIC_ASSIGN_OR_RETURN(info.dtype, dtype_from_onnx(tt.elem_type(), file + ": value '" + v.name() + "'"));
  if (tt.has_shape()) {
    info.has_shape = true;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value() && (d.dim_value() < 0 || d.dim_value() > kMaxDim))
        return Status::invalid(file + ": value '" + v.name() + "' declares dimension " +
                               std::to_string(info.dims.size()) + " as " + std::to_string(d.dim_value()) +
                               (d.dim_value() < 0 ? " (negative)" : " (above the largest Mosaic accepts, 2^31 - 1)"));
      info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      info.dim_params.push_back(d.dim_param());
    }
    if (static_cast<int64_t>(info.dims.size()) > kMaxRank)
      return Status::invalid(file + ": value '" + v.name() + "' has rank " + std::to_string(info.dims.size()) +
                             " (at most " + std::to_string(kMaxRank) + ")");
  }
  return info;
}

/// Subgraphs nest at most this deep (an If inside a Loop inside a Scan...): a hostile model
/// cannot recurse the loader off its stack.
constexpr int kMaxGraphDepth = 16;

Expected<Graph> graph_from_proto(onnx::GraphProto& gp, const std::string& base_dir, const std::string& path,
                                 int depth);

Expected<Attribute> attr_from_proto(onnx::AttributeProto& a, const std::string& base_dir, const std::string& what,
                                    const std::string& path, int depth) {
  if (a.type() == onnx::AttributeProto::GRAPH) {
    if (depth + 1 > kMaxGraphDepth)
      return Status::invalid(what + ": subgraph '" + a.name() + "' nests deeper than " +
                             std::to_string(kMaxGraphDepth) + " graphs");
    MOSAIC_ASSIGN_OR_RETURN(Graph sub, graph_from_proto(*a.mutable_g(), base_dir, path, depth + 1));
    return Attribute::of_graph(std::move(sub));
  }
  if (a.type() == onnx::AttributeProto::GRAPHS)
    return Status::unsupported(what + ": attribute '" + a.name() + "' holds several graphs");
  switch (a.type()) {
    case onnx::AttributeProto::INT: return Attribute::of_int(a.i());
    case onnx::AttributeProto::FLOAT: return Attribute::of_float(a.f());
    case onnx::AttributeProto::STRING: return Attribute::of_string(a.s());
    case onnx::AttributeProto::INTS: return Attribute::of_ints({a.ints().begin(), a.ints().end()});
    case onnx::AttributeProto::FLOATS: return Attribute::of_floats({a.floats().begin(), a.floats().end()});
    case onnx::AttributeProto::STRINGS: {
      Attribute r;
      r.kind = Attribute::Kind::kStrings;
      r.strings.assign(a.strings().begin(), a.strings().end());
      return r;
    }
    case onnx::AttributeProto::TENSOR: {
      MOSAIC_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(a.t(), base_dir, what + " attribute '" + a.name() + "'"));
      return Attribute::of_tensor(std::move(t));
    }
    default: {
      Attribute r;
      r.kind = Attribute::Kind::kOther;
      return r;
    }
  }
}

/// The values a subgraph reads that it does not define (its inputs, initializers and node
/// outputs): names of the enclosing graphs, in first-use order. A nested subgraph's own
/// outer values are already inputs of its node.
void add_outer_values(const Graph& sub, std::vector<std::string>& names) {
  std::set<std::string> defined(names.begin(), names.end());
  for (const ValueInfo& in : sub.inputs) defined.insert(in.name);
  for (const auto& kv : sub.initializers) defined.insert(kv.first);
  std::set<std::string> own = defined;
  auto use = [&](const std::string& v) {
    if (v.empty() || own.count(v)) return;
    own.insert(v);
    names.push_back(v);
  };
  for (const Node& n : sub.nodes) {
    for (const std::string& in : n.inputs) use(in);
    for (const std::string& out : n.outputs)
      if (!out.empty()) own.insert(out);
  }
  for (const ValueInfo& out : sub.outputs) use(out.name);
}

/// A graph's initializers, inputs, outputs and nodes; a node with subgraphs gets the outer
/// values they read appended to its inputs and listed in "mosaic.outer_scope".
Expected<Graph> graph_from_proto(onnx::GraphProto& gp, const std::string& base_dir, const std::string& path,
                                 int depth) {
  Graph g;
  g.source = path;
  g.name = gp.name();
  for (int i = 0; i < gp.initializer_size(); ++i) {
    auto* init = gp.mutable_initializer(i);
    MOSAIC_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(*init, base_dir, path + ": initializer '" + init->name() + "'"));
    g.initializers[init->name()] = std::move(t);
    // The bytes are released once copied, so loading peaks near one copy of the weights.
    if (init->has_raw_data()) delete init->release_raw_data();
  }
  for (const auto& in : gp.input()) {
    if (g.initializers.count(in.name())) continue;
    if (depth > 0 && !in.type().has_tensor_type() && in.type().value_case() == onnx::TypeProto::VALUE_NOT_SET) {
      // A subgraph input without a type: its node gives it one.
      ValueInfo info;
      info.name = in.name();
      g.inputs.push_back(std::move(info));
      continue;
    }
    MOSAIC_ASSIGN_OR_RETURN(ValueInfo info, value_info_from_proto(in, path));
    g.inputs.push_back(std::move(info));
  }
  for (const auto& out : gp.output()) {
    ValueInfo info;
    info.name = out.name();
    g.outputs.push_back(info);
  }
  int unnamed = 0;
  for (int k = 0; k < gp.node_size(); ++k) {
    auto& np = *gp.mutable_node(k);
    Node n;
    n.name = np.name().empty() ? np.op_type() + "_" + std::to_string(unnamed++) : np.name();
    n.op_type = np.op_type();
    n.domain = np.domain();
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    std::vector<std::string> outer;
    for (auto& a : *np.mutable_attribute()) {
      MOSAIC_ASSIGN_OR_RETURN(Attribute attr, attr_from_proto(a, base_dir, path + ": " + n.label(), path, depth));
      if (attr.kind == Attribute::Kind::kGraph) add_outer_values(*attr.g, outer);
      n.attrs[a.name()] = std::move(attr);
    }
    if (!outer.empty()) {
      n.inputs.insert(n.inputs.end(), outer.begin(), outer.end());
      n.attrs["mosaic.outer_scope"] = Attribute::of_strings(std::move(outer));
    }
    g.nodes.push_back(std::move(n));
  }
  return g;
}

/// Subgraphs compute at their model's opsets.
void set_subgraph_opsets(Node& n, int64_t opset, const std::map<std::string, int64_t>& custom) {
  for (auto& kv : n.attrs) {
    if (kv.second.kind != Attribute::Kind::kGraph) continue;
    Graph sub = *kv.second.g;
    sub.opset = opset;
    sub.custom_opsets = custom;
    for (Node& inner : sub.nodes) set_subgraph_opsets(inner, opset, custom);
    kv.second.g = std::make_shared<const Graph>(std::move(sub));
  }
}

}  // namespace

Expected<Graph> load_onnx(const std::string& path) {
  onnx::ModelProto model;
  {
    // The file's bytes are released once parsed; below, each initializer's bytes are
    // released once copied, so loading peaks near one copy of the weights, not three.
    MOSAIC_ASSIGN_OR_RETURN(std::string bytes, read_model_bytes(path));
    if (bytes.empty() || !model.ParseFromString(bytes))
      return Status::invalid(path + ": not a valid ONNX model (protobuf parse failed; truncated or not ONNX?)");
  }
  if (!model.has_graph() || (model.graph().node_size() == 0 && model.graph().output_size() == 0))
    return Status::invalid(path + ": not a valid ONNX model (no graph)");
  MOSAIC_RETURN_IF_ERROR(inline_local_functions(model, path));
  Graph g;
  g.source = path;
  g.name = model.graph().name();
  g.opset = 0;
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") g.opset = op.version();
    else g.custom_opsets[op.domain()] = op.version();
  bool uses_default_domain = false;
  for (const auto& np : model.graph().node())
    uses_default_domain = uses_default_domain || np.domain().empty() || np.domain() == "ai.onnx";
  if (g.opset == 0) {
    if (uses_default_domain) return Status::invalid(path + ": model imports no default-domain opset");
    g.opset = 17;  // only other domains: their nodes are reported as unsupported
  }
  // Each node's version follows from the opset (operators/onnx_versions.hpp); an opset newer
  // than the ONNX release Mosaic knows could hold op versions it has never seen.
  if (g.opset > onnx_latest_opset())
    return Status::unsupported(path + ": opset " + std::to_string(g.opset) + " is newer than ONNX " +
                               onnx_release() + "'s opset " + std::to_string(onnx_latest_opset()) +
                               ", the newest whose operator versions Mosaic knows");
  const std::string base_dir = fs::path(path).parent_path().string();
  MOSAIC_ASSIGN_OR_RETURN(Graph body, graph_from_proto(*model.mutable_graph(), base_dir, path, 0));
  g.nodes = std::move(body.nodes);
  g.inputs = std::move(body.inputs);
  g.outputs = std::move(body.outputs);
  g.initializers = std::move(body.initializers);
  for (Node& n : g.nodes) set_subgraph_opsets(n, g.opset, g.custom_opsets);
  return g;
}

Status save_onnx(const Graph& g, const std::string& path) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("mosaic");
  auto* op = model.add_opset_import();
  op->set_domain("");
  op->set_version(g.opset);
  std::map<std::string, int64_t> custom = g.custom_opsets;
  for (const auto& n : g.nodes)
    if (!n.domain.empty() && n.domain != "ai.onnx") custom.emplace(n.domain, 1);
  for (const auto& [domain, version] : custom) {
    auto* c = model.add_opset_import();
    c->set_domain(domain);
    c->set_version(version);
  }
  auto* gp = model.mutable_graph();
  gp->set_name(g.name);
  // Without a known shape the field is left out (an unknown rank): an empty one would declare
  // a scalar, which ONNX's checker and other engines hold against the node that writes it.
  auto set_type = [](onnx::ValueInfoProto* v, DType dt, const std::vector<int64_t>& dims,
                     const std::vector<std::string>& params, bool known = true) {
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(dtype_to_onnx(dt));
    if (!known) return;
    auto* sh = tt->mutable_shape();
    for (size_t i = 0; i < dims.size(); ++i) {
      auto* d = sh->add_dim();
      if (dims[i] >= 0) d->set_dim_value(dims[i]);
      else d->set_dim_param(i < params.size() && !params[i].empty() ? params[i] : "N");
    }
  };
  for (const auto& in : g.inputs) {
    auto* v = gp->add_input();
    v->set_name(in.name);
    set_type(v, in.dtype, in.dims, in.dim_params);
  }
  for (const auto& out : g.outputs) {
    auto* v = gp->add_output();
    v->set_name(out.name);
    auto d = g.value_descs.find(out.name);
    std::vector<int64_t> dims = out.has_shape ? out.dims : (d != g.value_descs.end() ? d->second.shape : Shape{});
    set_type(v, out.dtype, dims, out.dim_params, out.has_shape || d != g.value_descs.end());
  }
  for (const auto& [name, t] : g.initializers) tensor_to_proto(t, name, gp->add_initializer());
  for (const auto& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    if (!n.domain.empty()) np->set_domain(n.domain);
    for (const auto& i : n.inputs) np->add_input(i);
    for (const auto& o : n.outputs) np->add_output(o);
    for (const auto& [key, a] : n.attrs) {
      auto* ap = np->add_attribute();
      ap->set_name(key);
      switch (a.kind) {
        case Attribute::Kind::kInt: ap->set_type(onnx::AttributeProto::INT); ap->set_i(a.i); break;
        case Attribute::Kind::kFloat: ap->set_type(onnx::AttributeProto::FLOAT); ap->set_f(a.f); break;
        case Attribute::Kind::kString: ap->set_type(onnx::AttributeProto::STRING); ap->set_s(a.s); break;
        case Attribute::Kind::kInts:
          ap->set_type(onnx::AttributeProto::INTS);
          for (auto v : a.ints) ap->add_ints(v);
          break;
        case Attribute::Kind::kFloats:
          ap->set_type(onnx::AttributeProto::FLOATS);
          for (auto v : a.floats) ap->add_floats(v);
          break;
        case Attribute::Kind::kTensor:
          ap->set_type(onnx::AttributeProto::TENSOR);
          tensor_to_proto(*a.t, "", ap->mutable_t());
          break;
        default:
          return Status::unsupported(n.label() + ": attribute '" + key + "' cannot be exported");
      }
    }
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes)) return Status::io_error(path + ": cannot serialise the model (over 2 GiB?)");
  return write_file_atomic(path, bytes);
}

Expected<Tensor> load_tensor_pb(const std::string& path, std::string* name) {
  MOSAIC_ASSIGN_OR_RETURN(std::string bytes, read_model_bytes(path));
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes)) return Status::invalid(path + ": not a valid TensorProto");
  if (name) *name = p.name();
  return tensor_from_proto(p, fs::path(path).parent_path().string(), path);
}

Status save_tensor_pb(const Tensor& tensor, const std::string& name, const std::string& path) {
  onnx::TensorProto p;
  tensor_to_proto(tensor, name, &p);
  std::string bytes;
  if (!p.SerializeToString(&bytes)) return Status::io_error(path + ": cannot serialise the tensor");
  return write_file_atomic(path, bytes);
}

std::vector<std::pair<std::string, std::string>> onnx_library_versions() {
  const int v = GOOGLE_PROTOBUF_VERSION;  // 3021012 = 3.21.12
  return {{"ONNX", MOSAIC_ONNX_VERSION},
          {"protobuf", std::to_string(v / 1000000) + "." + std::to_string(v / 1000 % 1000) + "." + std::to_string(v % 1000)}};
}

}  // namespace mosaic
