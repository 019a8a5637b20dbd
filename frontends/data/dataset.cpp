#include "ir/checked.hpp"
#include "frontends/data/dataset.hpp"

#include <chrono>

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <filesystem>
#include <numeric>

namespace mosaic {
namespace {

namespace fs = std::filesystem;

/// Reads a whole file, decompressing gzip transparently (zlib passes plain files through).
Expected<std::string> read_maybe_gz(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::not_found(path + ": no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::io_error(path + ": cannot open");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string why = err != Z_OK && err != Z_STREAM_END ? msg : "";
  gzclose(f);
  if (n < 0 || !why.empty()) return Status::io_error(path + ": corrupt compressed data (" + why + ")");
  return out;
}

uint32_t be32(const std::string& s, size_t off) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + off);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

/// The first existing of DIR/NAME and DIR/NAME.gz.
std::string pick(const std::string& dir, const std::string& name) {
  const std::string plain = (fs::path(dir) / name).string();
  std::error_code ec;
  return fs::exists(plain, ec) ? plain : plain + ".gz";
}

}  // namespace

Expected<Dataset> load_idx(const std::string& images_path, const std::string& labels_path) {
  MOSAIC_ASSIGN_OR_RETURN(std::string img, read_maybe_gz(images_path));
  MOSAIC_ASSIGN_OR_RETURN(std::string lab, read_maybe_gz(labels_path));
  if (img.size() < 16 || be32(img, 0) != 0x803)
    return Status::invalid(images_path + ": not an IDX image file (magic 0x00000803 expected)");
  if (lab.size() < 8 || be32(lab, 0) != 0x801)
    return Status::invalid(labels_path + ": not an IDX label file (magic 0x00000801 expected)");
  const int64_t n = be32(img, 4), h = be32(img, 8), w = be32(img, 12), nl = be32(lab, 4);
  // The header's counts (up to 2^32 each) are checked before they are multiplied or allocated.
  MOSAIC_RETURN_IF_ERROR(check_shape({n, 1, h, w}, DType::kF32, images_path + ": IDX header"));
  if (static_cast<int64_t>(img.size()) != 16 + n * h * w)
    return Status::invalid(images_path + ": truncated (" + std::to_string(img.size()) + " bytes for " +
                           std::to_string(n) + " images of " + std::to_string(h) + "x" + std::to_string(w) + ")");
  if (static_cast<int64_t>(lab.size()) != 8 + nl) return Status::invalid(labels_path + ": truncated");
  if (nl != n)
    return Status::invalid(labels_path + ": " + std::to_string(nl) + " labels for " + std::to_string(n) + " images");
  Dataset d;
  d.name = images_path;
  d.images = Tensor::empty({DType::kF32, {n, 1, h, w}});
  d.labels = Tensor::empty({DType::kI64, {n}});
  const auto* px = reinterpret_cast<const unsigned char*>(img.data() + 16);
  for (int64_t i = 0; i < n * h * w; ++i) d.images.f32()[i] = static_cast<float>(px[i]) / 255.f;
  const auto* lb = reinterpret_cast<const unsigned char*>(lab.data() + 8);
  for (int64_t i = 0; i < n; ++i) {
    d.labels.i64()[i] = lb[i];
    d.classes = std::max<int64_t>(d.classes, lb[i] + 1);
  }
  return d;
}

Expected<Dataset> load_cifar(const std::vector<std::string>& files, int label_bytes, int64_t classes) {
  const int64_t record = label_bytes + 3 * 32 * 32;
  std::vector<std::string> blobs;
  int64_t n = 0;
  for (const auto& f : files) {
    MOSAIC_ASSIGN_OR_RETURN(std::string b, read_maybe_gz(f));
    if (b.empty() || static_cast<int64_t>(b.size()) % record != 0)
      return Status::invalid(f + ": " + std::to_string(b.size()) + " bytes is not a whole number of " +
                             std::to_string(record) + "-byte CIFAR records");
    n += static_cast<int64_t>(b.size()) / record;
    blobs.push_back(std::move(b));
  }
  Dataset d;
  d.name = files.empty() ? "" : files[0];
  d.classes = classes;
  d.images = Tensor::empty({DType::kF32, {n, 3, 32, 32}});
  d.labels = Tensor::empty({DType::kI64, {n}});
  int64_t i = 0;
  for (size_t k = 0; k < blobs.size(); ++k) {
    const auto* p = reinterpret_cast<const unsigned char*>(blobs[k].data());
    for (int64_t r = 0; r < static_cast<int64_t>(blobs[k].size()) / record; ++r, ++i) {
      const unsigned char* rec = p + r * record;
      const int64_t label = rec[label_bytes - 1];
      if (label >= classes) return Status::invalid(files[k] + ": record " + std::to_string(r) + " has label " +
                                                   std::to_string(label) + " >= " + std::to_string(classes));
      d.labels.i64()[i] = label;
      for (int64_t j = 0; j < 3 * 32 * 32; ++j) d.images.f32()[i * 3072 + j] = rec[label_bytes + j] / 255.f;
    }
  }
  return d;
}

Expected<DataSplits> load_data(const std::string& spec, uint64_t seed) {
  DataSplits s;
  std::string dir;
  if (spec == "fashion-mnist") dir = "/usr/share/datasets/fashion-mnist";
  else if (spec.rfind("idx:", 0) == 0) dir = spec.substr(4);
  if (!dir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return Status::not_found("--data " + spec + ": directory " + dir + " not found" +
                               (spec == "fashion-mnist" ? " (apt-get install dataset-fashion-mnist)" : ""));
    MOSAIC_ASSIGN_OR_RETURN(s.train, load_idx(pick(dir, "train-images-idx3-ubyte"), pick(dir, "train-labels-idx1-ubyte")));
    MOSAIC_ASSIGN_OR_RETURN(s.test, load_idx(pick(dir, "t10k-images-idx3-ubyte"), pick(dir, "t10k-labels-idx1-ubyte")));
    s.test.classes = s.train.classes = std::max(s.train.classes, s.test.classes);
    return s;
  }
  if (spec.rfind("cifar10:", 0) == 0 || spec.rfind("cifar100:", 0) == 0) {
    const bool c10 = spec.rfind("cifar10:", 0) == 0;
    const std::string d = spec.substr(c10 ? 8 : 9);
    std::error_code ec;
    if (!fs::is_directory(d, ec)) return Status::not_found("--data " + spec + ": directory " + d + " not found");
    std::vector<std::string> train;
    if (c10) {
      for (int k = 1; k <= 5; ++k) train.push_back((fs::path(d) / ("data_batch_" + std::to_string(k) + ".bin")).string());
    } else {
      train.push_back((fs::path(d) / "train.bin").string());
    }
    const std::string test = (fs::path(d) / (c10 ? "test_batch.bin" : "test.bin")).string();
    MOSAIC_ASSIGN_OR_RETURN(s.train, load_cifar(train, c10 ? 1 : 2, c10 ? 10 : 100));
    MOSAIC_ASSIGN_OR_RETURN(s.test, load_cifar({test}, c10 ? 1 : 2, c10 ? 10 : 100));
    return s;
  }
  if (spec.rfind("synthetic:", 0) == 0) {
    std::vector<int64_t> v;
    std::string rest = spec.substr(10);
    size_t pos = 0;
    while (pos <= rest.size()) {
      size_t comma = rest.find(',', pos);
      const std::string item = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      char* end = nullptr;
      const long long x = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end || x <= 0) return Status::invalid("--data " + spec + ": expected synthetic:N,C,H,W,K");
      v.push_back(x);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    if (v.size() != 5) return Status::invalid("--data " + spec + ": expected synthetic:N,C,H,W,K");
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> px(0.f, 1.f);
    const int64_t n = v[0], held = std::max<int64_t>(1, n / 6);
    for (Dataset* d : {&s.train, &s.test}) {
      const int64_t m = d == &s.train ? n - held : held;
      d->name = spec;
      d->classes = v[4];
      d->images = Tensor::empty({DType::kF32, {m, v[1], v[2], v[3]}});
      d->labels = Tensor::empty({DType::kI64, {m}});
      for (int64_t i = 0; i < d->images.numel(); ++i) d->images.f32()[i] = px(rng);
      for (int64_t i = 0; i < m; ++i) d->labels.i64()[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(v[4]));
    }
    return s;
  }
  return Status::invalid("--data '" + spec +
                         "': expected fashion-mnist, idx:DIR, cifar10:DIR, cifar100:DIR or synthetic:N,C,H,W,K");
}

BatchIterator::BatchIterator(const Dataset& data, int64_t batch, bool shuffle, uint64_t seed)
    : data_(data), batch_(batch), shuffle_(shuffle), rng_(seed), order_(static_cast<size_t>(data.size())) {
  std::iota(order_.begin(), order_.end(), 0);
}

void BatchIterator::start_epoch() {
  if (!shuffle_) return;
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng_() % i]);
}

int64_t BatchIterator::batches_per_epoch() const { return batch_ > 0 ? data_.size() / (batch_ * ranks_) : 0; }

void BatchIterator::fill(int64_t b, Tensor& images, Tensor& labels) const {
  const int64_t n = std::max<int64_t>(data_.size(), 1);
  const size_t bytes = data_.images.bytes() / static_cast<size_t>(n);  // one sample, any dtype
  const int64_t per_label = data_.labels.numel() / n;                   // 1, or T for token data
  for (int64_t i = 0; i < batch_; ++i) {
    const int64_t src = order_[static_cast<size_t>((b * ranks_ + rank_) * batch_ + i)];
    std::memcpy(static_cast<char*>(images.data()) + i * bytes, static_cast<const char*>(data_.images.data()) + src * bytes,
                bytes);
    std::copy(data_.labels.i64() + src * per_label, data_.labels.i64() + (src + 1) * per_label,
              labels.i64() + i * per_label);
  }
  if (norm_.enabled()) {
    const int64_t per = data_.images.numel() / n, c = data_.images.dim(1);
    norm_.apply(images.f32(), batch_, c, per / c);
  }
}

void Normalization::apply(float* images, int64_t count, int64_t channels, int64_t pixels_per_channel) const {
  for (int64_t n = 0; n < count; ++n)
    for (int64_t c = 0; c < channels; ++c) {
      const float m = mean[static_cast<size_t>(c)], inv = 1.f / std[static_cast<size_t>(c)];
      float* x = images + (n * channels + c) * pixels_per_channel;
      for (int64_t i = 0; i < pixels_per_channel; ++i) x[i] = (x[i] - m) * inv;
    }
}

Expected<Normalization> parse_normalization(const std::string& spec, const Dataset& train) {
  Normalization n;
  if (spec.empty() || spec == "none") return n;
  if (train.images.dtype() != DType::kF32 || train.images.rank() < 2)
    return Status::invalid("--normalize '" + spec + "': " + train.name + " holds token ids, not images");
  const int64_t channels = train.images.dim(1);
  const int64_t per = train.images.numel() / std::max<int64_t>(train.size(), 1) / channels;
  if (spec == "auto") {
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < train.size(); ++i) {
        const float* x = train.images.f32() + (i * channels + c) * per;
        for (int64_t k = 0; k < per; ++k) sum += x[k], sq += static_cast<double>(x[k]) * x[k];
      }
      const double cnt = static_cast<double>(train.size() * per);
      const double mean = sum / cnt, var = std::max(sq / cnt - mean * mean, 0.0);
      n.mean.push_back(static_cast<float>(mean));
      n.std.push_back(static_cast<float>(std::sqrt(var) > 1e-12 ? std::sqrt(var) : 1.0));
    }
    return n;
  }
  const auto colon = spec.find(':');
  if (colon == std::string::npos)
    return Status::invalid("--normalize '" + spec + "': expected none, auto or MEAN[,MEAN..]:STD[,STD..]");
  auto parse_list = [&](const std::string& s, std::vector<float>& out) -> Status {
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
      char* end = nullptr;
      const float v = std::strtof(item.c_str(), &end);
      if (item.empty() || *end != '\0') return Status::invalid("--normalize '" + spec + "': '" + item + "' is not a number");
      out.push_back(v);
    }
    if (out.size() == 1) out.assign(static_cast<size_t>(channels), out[0]);
    if (static_cast<int64_t>(out.size()) != channels)
      return Status::invalid("--normalize '" + spec + "': " + std::to_string(out.size()) + " values for " +
                             std::to_string(channels) + " channels");
    return Status::ok();
  };
  MOSAIC_RETURN_IF_ERROR(parse_list(spec.substr(0, colon), n.mean));
  MOSAIC_RETURN_IF_ERROR(parse_list(spec.substr(colon + 1), n.std));
  for (float s : n.std)
    if (!(s > 0)) return Status::invalid("--normalize '" + spec + "': standard deviations must be positive");
  return n;
}

Prefetcher::Prefetcher(BatchIterator& it, const TensorDesc& inputs, const Shape& labels, bool threaded)
    : it_(it), threaded_(threaded) {
  for (int s = 0; s < 2; ++s) {
    images_[s] = Tensor::empty(inputs);
    labels_[s] = Tensor::empty({DType::kI64, labels});
  }
}

Prefetcher::~Prefetcher() { wait(); }

void Prefetcher::wait() {
  if (pending_.valid()) pending_.get();
}

void Prefetcher::launch(int64_t b) {
  pending_batch_ = b;
  if (b >= it_.batches_per_epoch()) return;
  const int s = static_cast<int>(b & 1);
  auto fill = [this, b, s] {
    const auto t0 = std::chrono::steady_clock::now();
    it_.fill(b, images_[s], labels_[s]);
    load_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  };
  if (threaded_)
    pending_ = std::async(std::launch::async, fill);
  else
    fill();
}

void Prefetcher::start_epoch() {
  wait();
  it_.start_epoch();
  launch(0);
}

void Prefetcher::next(int64_t b, const Tensor** images, const Tensor** labels) {
  const auto t0 = std::chrono::steady_clock::now();
  if (b != pending_batch_) {  // not the batch being prefetched: load it now
    wait();
    launch(b);
  }
  wait();
  const int s = static_cast<int>(b & 1);
  *images = &images_[s];
  *labels = &labels_[s];
  launch(b + 1);  // the other buffer; the caller holds this one until its next call
  // Everything next() cost the caller: waiting, and (unthreaded) loading the next batch.
  wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace mosaic
