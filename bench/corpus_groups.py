#!/usr/bin/python3
"""The corpus comparison by model group: onednn / ONNX Runtime per group (median, lowest, highest).

Reads a bench/compare_peers.py --json run over the corpus (tests/corpus/cases, or the same
models at other batches: bench/corpus_batches.sh) and prints the Markdown table
docs/performance.md shows.

usage: bench/corpus_groups.py RUN.json [RUN.json ...]
"""
import json
import statistics
import sys

GROUPS = [
    ("encoders (BERT family)", {"albert", "bert", "bert_classifier", "deberta_v2", "distilbert", "electra", "roberta"}),
    ("vision transformers", {"beit", "clip_vision", "deit", "swin", "vit", "segformer", "timm_deit", "timm_levit",
                             "timm_mixer", "timm_swin", "timm_vit"}),
    ("CNNs with depthwise convolutions", {"convnext_hf", "timm_convnext", "timm_efficientnet", "timm_ghostnet",
                                          "timm_mobilenetv3", "timm_rexnet", "tv_mnasnet", "tv_mobilenet_v3"}),
    ("other CNNs", {"resnet_hf", "timm_resnet", "tv_deeplabv3", "tv_fcn", "tv_shufflenet", "tv_fasterrcnn"}),
    ("decoders and encoder-decoders", {"bloom", "gpt2", "gpt_neo", "llama", "mistral", "opt", "phi", "qwen2", "bart",
                                       "marian", "t5"}),
    ("speech", {"wav2vec2", "whisper_encoder"}),
]


def ratios(run):
    out = {}
    for r in run["results"]:
        e = r["engines"]
        m, o = e.get("mosaic-onednn", {}), e.get("onnxruntime", {})
        if "images_per_s" in m and "images_per_s" in o:
            out[r["model"]] = (m["images_per_s"] / o["images_per_s"], r["batch"])
    return out


def main():
    for path in sys.argv[1:]:
        run = json.load(open(path))
        rs = ratios(run)
        batches = sorted({b for _, b in rs.values()})
        print(f"{path} (batch {', '.join(map(str, batches))}, {run['date']}):\n")
        print("| corpus group | models x exporters | onednn / ONNX Runtime, median | lowest | highest |")
        print("|---|---|---|---|---|")
        for name, models in GROUPS:
            g = [v for k, (v, _) in rs.items() if k.split(".")[0] in models]
            if g:
                print(f"| {name} | {len(g)} | {statistics.median(g):.2f}x | {min(g):.2f}x | {max(g):.2f}x |")
        allr = [v for v, _ in rs.values()]
        print(f"| **all** | **{len(allr)}** | **{statistics.median(allr):.2f}x** | {min(allr):.2f}x | {max(allr):.2f}x |")
        ahead = sum(v > 1 for v in allr)
        print(f"\nonednn ahead in {ahead} of {len(allr)} rows.\n")


if __name__ == "__main__":
    main()
