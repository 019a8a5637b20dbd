// The end of every command's --help: two or three commands to paste, and where the full
// description lives. Kept apart from the option definitions (main.cpp) so that both stay short.
#include "cli/commands.hpp"

#include <map>

namespace mosaic::cli {

std::string command_footer(const std::string& command) {
  static const std::map<std::string, std::pair<std::string, std::string>> kFooters = {
      {"info", {"mosaic info zoo:alexnet-cifar --batch 64\n  mosaic info model.onnx --no-nodes", "cli.md#info"}},
      {"bench",
       {"mosaic bench zoo:alexnet-cifar --backends im2col,onednn --batch 64 --json r.json\n"
        "  mosaic bench model.onnx --assign Conv=onednn,*=im2col\n"
        "  mosaic bench zoo:fmnist-cnn --mode training --backends onednn --json - | python3 -m json.tool",
        "cli.md#bench"}},
      {"verify",
       {"mosaic verify /usr/share/libonnx-testdata/data/node --backend all --quiet\n"
        "  mosaic verify --per-node zoo:alexnet-cifar --backend onednn",
        "cli.md#verify, conformance.md"}},
      {"export", {"mosaic export alexnet-cifar -o alexnet.onnx\n  mosaic export fmnist-cnn -o fmnist.onnx", "cli.md#export"}},
      {"quantize",
       {"mosaic quantize zoo:fmnist-cnn --data fashion-mnist -o fmnist-int8.onnx\n"
        "  mosaic quantize model.onnx --method entropy --json q.json",
        "quantization.md"}},
      {"generate",
       {"mosaic generate zoo:gpt2-tiny --prompt-tokens 16 --new-tokens 32\n"
        "  mosaic generate decoder.onnx --backend onednn --prompt-ids 464,3290,318 --temperature 0.8 --top-k 40 --json g.json",
        "generation.md"}},
      {"train",
       {"mosaic train zoo:fmnist-cnn --data fashion-mnist --optimizer adam --lr 0.002 --batch 64 --epochs 1\n"
        "  mosaic train zoo:fmnist-cnn --data synthetic:512,1,28,28,10 --backend im2col --json t.json",
        "training.md"}},
      {"gradcheck",
       {"mosaic gradcheck zoo:fmnist-cnn --batch 2 --backend all\n"
        "  mosaic gradcheck zoo:fmnist-cnn --batch 2 --plant conv-dw-scale   (a planted bug: FAIL)",
        "gradcheck.md"}},
      {"optcheck", {"mosaic optcheck --optimizer adam\n  mosaic optcheck --optimizer-plugin build/examples/custom_optimizer/libmosaic_lion.so",
                    "gradcheck.md, training.md"}},
      {"sweep", {"mosaic sweep examples/sweeps/seed_table3.yaml\n  mosaic sweep my.yaml --max-cells 2   (run two cells, resume later)",
                 "sweeps.md"}},
      {"history", {"mosaic history\n  mosaic history --db other.sqlite", "cli.md#results-store-history-and-compare"}},
      {"compare", {"mosaic compare last~1 last\n  mosaic compare 12 15 --threshold 3", "metrics.md#comparing-runs"}},
      {"report", {"mosaic report last~1 last -o report.html\n  mosaic report r.json sweeps/seed-table3/ -o report.html", "report.md"}},
      {"simulate", {"mosaic simulate zoo:vgg16-cifar --network 10gbe --ranks 1,2,4,8,16,32", "distributed.md"}},
      {"plan", {"mosaic plan zoo:alexnet-cifar --assign Conv=onednn,*=im2col", "cli.md#plan"}},
      {"backends", {"mosaic backends\n  mosaic backends --markdown", "backends.md"}},
  };
  auto it = kFooters.find(command);
  if (it == kFooters.end()) return "";
  return "\nExamples:\n  " + it->second.first + "\n\nDocumentation: docs/" + it->second.second +
         " (in the source tree)\n";
}

}  // namespace mosaic::cli
