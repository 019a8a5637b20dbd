// Planted bug: Adam with beta1 used in the second moment. optcheck --reference adam must FAIL.
#define MOSAIC_TEST_NO_EXPORT
#include "adam_copy.cpp"

class AdamBeta1InV final : public AdamCopy {
 public:
  using AdamCopy::AdamCopy;
  std::string name() const override { return "adam_beta1_in_v"; }

 protected:
  double second_moment_beta() const override { return config_.beta1; }
};

MOSAIC_OPTIMIZER_PLUGIN("adam_beta1_in_v", AdamBeta1InV)
