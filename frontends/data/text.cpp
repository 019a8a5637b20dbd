// Token data (frontends/data/text.hpp).
#include "frontends/data/text.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/loss.hpp"
#include "ir/checked.hpp"

namespace mosaic {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxTextBytes = int64_t{1} << 30;

/// A regular file's bytes (a FIFO or device would block or never end: refused).
Expected<std::string> read_regular(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::not_found(path + ": no such file");
  if (!fs::is_regular_file(path, ec)) return Status::invalid(path + ": not a regular file");
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::io_error(path + ": cannot read its size");
  if (static_cast<int64_t>(size) > kMaxTextBytes)
    return Status::invalid(path + ": " + std::to_string(size) + " bytes; text data is limited to 1 GiB");
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::io_error(path + ": cannot open");
  std::string s(static_cast<size_t>(size), '\0');
  if (size > 0 && !f.read(s.data(), static_cast<std::streamsize>(size)))
    return Status::io_error(path + ": read failed");
  return s;
}

/// The code point length of a UTF-8 lead byte and the sequence at `s[i]`, or 0 if invalid.
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return 0;
  if (n == 2 && b < 0xC2) return 0;  // overlong
  return n;
}

Expected<std::vector<int64_t>> parse_ints(const std::string& spec, const std::string& body, size_t count,
                                          const char* form) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos <= body.size()) {
    const size_t comma = body.find(',', pos);
    const std::string item = body.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long long x = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end || x <= 0 || x > (int64_t{1} << 31))
      return Status::invalid("--data " + spec + ": expected " + form);
    v.push_back(x);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (v.size() != count) return Status::invalid("--data " + spec + ": expected " + form);
  return v;
}

}  // namespace

Expected<Objective> parse_objective(const std::string& name) {
  if (name == "next-token") return Objective::kNextToken;
  if (name == "masked-lm") return Objective::kMaskedLm;
  return Status::invalid("--objective '" + name + "': expected next-token or masked-lm");
}

Expected<TokenStream> load_text_tokens(const std::string& path, bool characters) {
  MOSAIC_ASSIGN_OR_RETURN(const std::string text, read_regular(path));
  if (text.empty()) return Status::invalid(path + ": empty file: no tokens to train on");
  TokenStream s;
  s.name = path;
  s.ids.reserve(text.size());
  if (!characters) {
    for (char c : text) s.ids.push_back(static_cast<unsigned char>(c));
    s.vocab = 256;
    return s;
  }
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    if (n == 0)
      return Status::invalid(path + ": not UTF-8 at byte " + std::to_string(i) +
                             " (use text:FILE for byte-level tokens)");
    auto [it, fresh] = index.emplace(text.substr(i, n), static_cast<int64_t>(index.size()));
    s.ids.push_back(it->second);
    i += n;
  }
  s.vocab = static_cast<int64_t>(index.size());
  return s;
}

Expected<DataSplits> token_splits(const TokenStream& s, const TokenTask& task, uint64_t seed) {
  const int64_t T = task.seq;
  if (T < 1) return Status::invalid(s.name + ": the model's sequence length must be positive");
  const bool mlm = task.objective == Objective::kMaskedLm;
  const int64_t need_vocab = s.vocab + (mlm ? 1 : 0);  // masked-LM's [MASK] is one id past the data's
  if (task.model_vocab < need_vocab)
    return Status::invalid(s.name + ": the data has a vocabulary of " + std::to_string(s.vocab) + " tokens" +
                           (mlm ? " (+1 for [MASK])" : "") + " but the model's embedding has " +
                           std::to_string(task.model_vocab) + " rows");
  const int64_t window = mlm ? T : T + 1, count = (static_cast<int64_t>(s.ids.size()) - (mlm ? 0 : 1)) / T;
  if (count < 2 || static_cast<int64_t>(s.ids.size()) < window)
    return Status::invalid(s.name + ": " + std::to_string(s.ids.size()) + " tokens make fewer than two sequences of " +
                           std::to_string(T));
  const int64_t held = std::max<int64_t>(1, count / 10);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int64_t> any(0, s.vocab - 1);
  DataSplits out;
  for (Dataset* d : {&out.train, &out.test}) {
    const int64_t first = d == &out.train ? 0 : count - held, m = d == &out.train ? count - held : held;
    d->name = s.name;
    d->classes = task.model_vocab;
    d->images = Tensor::empty({DType::kI64, {m, T}});
    d->labels = Tensor::empty({DType::kI64, {m, T}});
    for (int64_t n = 0; n < m; ++n) {
      const int64_t* w = s.ids.data() + (first + n) * T;
      int64_t* x = d->images.i64() + n * T;
      int64_t* y = d->labels.i64() + n * T;
      for (int64_t t = 0; t < T; ++t) {
        x[t] = w[t];
        y[t] = mlm ? kIgnoreIndex : w[t + 1];
        if (!mlm || u(rng) >= 0.15) continue;
        y[t] = w[t];
        const double r = u(rng);
        x[t] = r < 0.8 ? s.vocab : r < 0.9 ? any(rng) : w[t];
      }
    }
  }
  return out;
}

bool is_token_spec(const std::string& spec) {
  for (const char* form : {"text:", "text-chars:", "synthetic-tokens:", "synthetic-classes:"})
    if (spec.rfind(form, 0) == 0) return true;
  return false;
}

namespace {

/// synthetic-classes:N,T,V,K: N sequences of T ids in [0, V), each in one of K classes (a
/// sequence classifier's data). A sequence of class k has id k at each position with
/// probability 1/2, else an id uniform in [0, V): a model that learns which of the ids 0..K-1
/// is frequent learns it; one that does not stays at chance (1/K). 1/10 (at least one) held out.
Expected<DataSplits> synthetic_classes(const std::string& spec, const TokenTask& task, uint64_t seed) {
  MOSAIC_ASSIGN_OR_RETURN(const std::vector<int64_t> v,
                          parse_ints(spec, spec.substr(18), 4, "synthetic-classes:N,T,V,K"));
  const int64_t n = v[0], T = v[1], V = v[2], K = v[3];
  if (T != task.seq)
    return Status::invalid("--data " + spec + ": sequences of " + std::to_string(T) +
                           " tokens, but the model's input takes " + std::to_string(task.seq));
  if (n < 2) return Status::invalid("--data " + spec + ": at least two sequences (one is held out)");
  if (K < 2 || K > V)
    return Status::invalid("--data " + spec + ": K = " + std::to_string(K) + " classes; it takes 2 <= K <= V");
  if (V > task.model_vocab)
    return Status::invalid("--data " + spec + ": ids below " + std::to_string(V) + " but the model's embedding has " +
                           std::to_string(task.model_vocab) + " rows");
  MOSAIC_RETURN_IF_ERROR(checked_bytes(n, T * static_cast<int64_t>(sizeof(int64_t)), "--data " + spec).status());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> any(0, V - 1), cls(0, K - 1);
  std::bernoulli_distribution marked(0.5);
  const int64_t held = std::max<int64_t>(1, n / 10);
  DataSplits out;
  for (Dataset* d : {&out.train, &out.test}) {
    const int64_t m = d == &out.train ? n - held : held;
    d->name = spec;
    d->classes = K;
    d->images = Tensor::empty({DType::kI64, {m, T}});
    d->labels = Tensor::empty({DType::kI64, {m}});
    for (int64_t i = 0; i < m; ++i) {
      const int64_t k = cls(rng);
      d->labels.i64()[i] = k;
      for (int64_t t = 0; t < T; ++t) d->images.i64()[i * T + t] = marked(rng) ? k : any(rng);
    }
  }
  return out;
}

}  // namespace

Expected<DataSplits> load_token_data(const std::string& spec, const TokenTask& task, uint64_t seed) {
  if (spec.rfind("text:", 0) == 0 || spec.rfind("text-chars:", 0) == 0) {
    const bool chars = spec.rfind("text-chars:", 0) == 0;
    MOSAIC_ASSIGN_OR_RETURN(TokenStream s, load_text_tokens(spec.substr(chars ? 11 : 5), chars));
    return token_splits(s, task, seed);
  }
  if (spec.rfind("synthetic-tokens:", 0) == 0) {
    MOSAIC_ASSIGN_OR_RETURN(const std::vector<int64_t> v, parse_ints(spec, spec.substr(17), 3, "synthetic-tokens:N,T,V"));
    if (v[1] != task.seq)
      return Status::invalid("--data " + spec + ": sequences of " + std::to_string(v[1]) +
                             " tokens, but the model's input takes " + std::to_string(task.seq));
    if (v[0] < 2) return Status::invalid("--data " + spec + ": at least two sequences (one is held out)");
    TokenStream s;
    s.name = spec;
    s.vocab = v[2];
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> id(0, v[2] - 1);
    s.ids.resize(static_cast<size_t>(v[0] * v[1] + 1));
    for (auto& x : s.ids) x = id(rng);
    return token_splits(s, task, seed + 1);
  }
  if (spec.rfind("synthetic-classes:", 0) == 0) return synthetic_classes(spec, task, seed);
  return Status::invalid("--data '" + spec +
                         "': expected text:FILE, text-chars:FILE, synthetic-tokens:N,T,V or synthetic-classes:N,T,V,K");
}

}  // namespace mosaic
