// Datasets for training: IDX files (MNIST / Fashion-MNIST, plain or .gz) and synthetic
// data, as float images in [0, 1] (NCHW) with int64 labels, plus seeded batching.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "ir/tensor.hpp"

namespace mosaic {

struct Dataset {
  std::string name;
  /// float32 [N, C, H, W], pixels scaled to [0, 1]; or token ids int64 [N, T]
  /// (frontends/data/text.hpp)
  Tensor images;
  Tensor labels;  ///< int64 [N]; token data: [N, T], kIgnoreIndex where not scored
  int64_t classes = 0;  ///< token data: the model's vocabulary
  int64_t size() const { return images.defined() ? images.dim(0) : 0; }
};

struct DataSplits {
  Dataset train, test;
};

/// Reads an IDX image file (magic 0x803, uint8) and label file (0x801) — plain or gzip.
/// Errors name the file and what is wrong (missing, truncated, bad magic, count mismatch).
Expected<Dataset> load_idx(const std::string& images_path, const std::string& labels_path);

/// Reads CIFAR binary files: records of `label_bytes` label bytes (the last one is used)
/// followed by 3 x 32 x 32 pixel bytes.
Expected<Dataset> load_cifar(const std::vector<std::string>& files, int label_bytes, int64_t classes);

/// A data spec:
///   fashion-mnist            Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist)
///   idx:DIR                  DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
///   cifar10:DIR              DIR/data_batch_{1..5}.bin, DIR/test_batch.bin (CIFAR-10 binary)
///   cifar100:DIR             DIR/train.bin, DIR/test.bin (CIFAR-100 binary, fine labels)
///   synthetic:N,C,H,W,K      N random images of C x H x W in K classes (seeded), 1/6 held out
Expected<DataSplits> load_data(const std::string& spec, uint64_t seed);

/// Per-channel input normalisation x' = (x - mean[c]) / std[c].
struct Normalization {
  std::vector<float> mean, std;
  bool enabled() const { return !mean.empty(); }
  /// Normalises `count` images of [C, H, W] in place.
  void apply(float* images, int64_t count, int64_t channels, int64_t pixels_per_channel) const;
};

/// "none"; "auto" (per-channel mean and standard deviation of `train`); or explicit
/// "MEAN[,MEAN..]:STD[,STD..]" with one value per channel (or one for all).
Expected<Normalization> parse_normalization(const std::string& spec, const Dataset& train);

/// Visits a dataset in batches: seeded Fisher-Yates shuffle per epoch (or file order),
/// full batches only (the last partial batch of an epoch is dropped).
class BatchIterator {
 public:
  BatchIterator(const Dataset& data, int64_t batch, bool shuffle, uint64_t seed);
  /// Starts an epoch (reshuffles when shuffling).
  void start_epoch();
  int64_t batches_per_epoch() const;
  /// Copies batch b of the current epoch into images [batch, ...] (any dtype) and labels
  /// [batch] (token data: [batch, T]). Normalised when a normalisation is set.
  void fill(int64_t b, Tensor& images, Tensor& labels) const;
  void set_normalization(Normalization n) { norm_ = std::move(n); }
  /// Data-parallel shard: `ranks` iterators with the same seed share one order per epoch;
  /// global batch b is images [b·ranks·batch, (b+1)·ranks·batch) of that order, and this
  /// rank fills its slice [rank·batch, (rank+1)·batch) of it.
  void set_shard(int rank, int ranks) { rank_ = rank, ranks_ = ranks; }

 private:
  const Dataset& data_;
  Normalization norm_;
  int rank_ = 0, ranks_ = 1;
  int64_t batch_;
  bool shuffle_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
};

/// The background loader: while the caller trains on batch b, a worker thread assembles
/// batch b + 1 (gather in shuffled order, normalise) into the other of two buffers.
/// Without threading it fills on the caller's thread; the batches are the same.
class Prefetcher {
 public:
  /// Batches of `inputs` (e.g. float32 [B, C, H, W] or int64 [B, T]) with labels of shape
  /// `labels` ([B] or [B, T]).
  Prefetcher(BatchIterator& it, const TensorDesc& inputs, const Shape& labels, bool threaded);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  /// Starts an epoch (waits for in-flight work, reshuffles, begins loading batch 0).
  void start_epoch();
  /// Batch b of the epoch (b = 0, 1, ... in order); valid until the next call.
  void next(int64_t b, const Tensor** images, const Tensor** labels);
  /// Nanoseconds spent filling batches (on the loader thread when threaded), and spent by
  /// the caller inside next() waiting for one: the exposed part. Cumulative.
  int64_t load_ns() const { return load_ns_.load(); }
  int64_t wait_ns() const { return wait_ns_; }

 private:
  void launch(int64_t b);
  void wait();
  BatchIterator& it_;
  bool threaded_;
  Tensor images_[2], labels_[2];
  std::future<void> pending_;
  int64_t pending_batch_ = -1;
  std::atomic<int64_t> load_ns_{0};
  int64_t wait_ns_ = 0;
};

}  // namespace mosaic
