#!/usr/bin/env python3
"""Writes the corpus of today's exports: Hugging Face transformers, timm and torchvision
models built from tiny configs with random weights (no hub access), each exported with both
of PyTorch's ONNX exporters (the TorchScript-based one and the torch.export-based one),
checked ONNX Runtime against PyTorch, and written as ONNX backend-test cases whose expected
outputs are ONNX Runtime's:

    python3 -m venv /tmp/venv
    /tmp/venv/bin/pip install torch torchvision transformers timm onnx onnxscript onnxruntime
    /tmp/venv/bin/python tests/corpus/make_corpus.py tests/corpus/cases

Each case is OUT/<model>.<exporter>/ (model.onnx, test_data_set_0/). OUT/MANIFEST.tsv lists
every model x exporter with what happened (exported, ONNX Runtime's agreement with PyTorch,
the opset, the file size); a model that an exporter or ONNX Runtime cannot take is listed
with the reason and has no case. The test suite reads only what this script wrote
(tests/corpus/check_corpus.sh). --only NAME[,NAME] rebuilds some models.

MOSAIC_CORPUS_BATCH=N writes the same models at batch N (default 2, the committed cases'):
bench/corpus_batches.sh times Mosaic and ONNX Runtime on them at batches 1 and 8 (written
outside the tree, never committed).
"""
import argparse
import contextlib
import io
import os
import shutil
import sys
import traceback
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

warnings.filterwarnings("ignore")
torch.manual_seed(0)
SEQ, IMG = 8, 32
BATCH = int(os.environ.get("MOSAIC_CORPUS_BATCH", "2"))


def ids(vocab, batch=BATCH, seq=SEQ, seed=0):
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


class First(torch.nn.Module):
    """A Hugging Face model with its first output only (the hidden states or logits)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        out = self.model(*args, return_dict=False)
        return out[0]


class KeywordFirst(torch.nn.Module):
    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args)), return_dict=False)[0]


# ---- Hugging Face transformers -------------------------------------------------------------

def hf_text(family, config_cls, model_cls, **cfg):
    def build():
        import transformers as tf
        config = getattr(tf, config_cls)(**cfg)
        model = getattr(tf, model_cls)(config).eval()
        vocab = cfg.get("vocab_size", 100)
        x = ids(vocab)
        mask = torch.ones_like(x)
        mask[min(1, BATCH - 1), -3:] = 0  # the second row padded (the only one at batch 1)
        return KeywordFirst(model, ["input_ids", "attention_mask"]), (x, mask), ["input_ids", "attention_mask"]
    return family, build


def hf_seq2seq(family, config_cls, model_cls, **cfg):
    def build():
        import transformers as tf
        config = getattr(tf, config_cls)(**cfg)
        model = getattr(tf, model_cls)(config).eval()
        vocab = cfg.get("vocab_size", 100)
        return (KeywordFirst(model, ["input_ids", "decoder_input_ids"]), (ids(vocab), ids(vocab, seq=5, seed=1)),
                ["input_ids", "decoder_input_ids"])
    return family, build


def hf_vision(family, config_cls, model_cls, **cfg):
    def build():
        import transformers as tf
        config = getattr(tf, config_cls)(**cfg)
        model = getattr(tf, model_cls)(config).eval()
        size = cfg.get("image_size", IMG)
        return KeywordFirst(model, ["pixel_values"]), (torch.randn(BATCH, cfg.get("num_channels", 3), size, size),), ["pixel_values"]
    return family, build


def hf_audio(family, config_cls, model_cls, input_name, shape, **cfg):
    def build():
        import transformers as tf
        config = getattr(tf, config_cls)(**cfg)
        model = getattr(tf, model_cls)(config).eval()
        return KeywordFirst(model, [input_name]), (torch.randn(*shape),), [input_name]
    return family, build


TEXT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64)
DEC = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
           max_position_embeddings=64)
VIT = dict(image_size=IMG, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
           intermediate_size=64)

MODELS = {
    # encoders
    "bert": hf_text("hf encoder", "BertConfig", "BertModel", **TEXT),
    "roberta": hf_text("hf encoder", "RobertaConfig", "RobertaModel", **TEXT),
    "distilbert": hf_text("hf encoder", "DistilBertConfig", "DistilBertModel", vocab_size=100, dim=32, n_layers=2,
                          n_heads=2, hidden_dim=64, max_position_embeddings=64),
    "albert": hf_text("hf encoder", "AlbertConfig", "AlbertModel", embedding_size=16, **TEXT),
    "electra": hf_text("hf encoder", "ElectraConfig", "ElectraModel", embedding_size=16, **TEXT),
    "deberta_v2": hf_text("hf encoder", "DebertaV2Config", "DebertaV2Model", **TEXT),
    "bert_classifier": hf_text("hf encoder", "BertConfig", "BertForSequenceClassification", num_labels=3, **TEXT),
    # decoders
    "gpt2": hf_text("hf decoder", "GPT2Config", "GPT2LMHeadModel", vocab_size=100, n_embd=32, n_layer=2, n_head=2,
                    n_positions=64),
    "llama": hf_text("hf decoder", "LlamaConfig", "LlamaForCausalLM", num_key_value_heads=1, **DEC),
    "mistral": hf_text("hf decoder", "MistralConfig", "MistralForCausalLM", num_key_value_heads=1, **DEC),
    "qwen2": hf_text("hf decoder", "Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=1, **DEC),
    "phi": hf_text("hf decoder", "PhiConfig", "PhiForCausalLM", **DEC),
    "opt": hf_text("hf decoder", "OPTConfig", "OPTForCausalLM", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=2, ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=64),
    "gpt_neo": hf_text("hf decoder", "GPTNeoConfig", "GPTNeoForCausalLM", vocab_size=100, hidden_size=32, num_layers=2,
                       num_heads=2, attention_types=[[["global", "local"], 1]], window_size=4, max_position_embeddings=64),
    "bloom": hf_text("hf decoder", "BloomConfig", "BloomForCausalLM", vocab_size=100, hidden_size=32, n_layer=2, n_head=2),
    # encoder-decoders
    "t5": hf_seq2seq("hf encoder-decoder", "T5Config", "T5ForConditionalGeneration", vocab_size=100, d_model=32,
                     d_kv=16, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0),
    "bart": hf_seq2seq("hf encoder-decoder", "BartConfig", "BartForConditionalGeneration", vocab_size=100, d_model=32,
                       encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                       encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64),
    "marian": hf_seq2seq("hf encoder-decoder", "MarianConfig", "MarianMTModel", vocab_size=100, d_model=32,
                         encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                         encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0,
                         decoder_start_token_id=0),
    # vision
    "vit": hf_vision("hf vision", "ViTConfig", "ViTModel", **VIT),
    "deit": hf_vision("hf vision", "DeiTConfig", "DeiTModel", **VIT),
    "beit": hf_vision("hf vision", "BeitConfig", "BeitModel", **VIT),
    "swin": hf_vision("hf vision", "SwinConfig", "SwinModel", image_size=IMG, patch_size=4, embed_dim=16,
                      depths=[1, 1], num_heads=[1, 2], window_size=4),
    "convnext_hf": hf_vision("hf vision", "ConvNextConfig", "ConvNextModel", image_size=IMG, hidden_sizes=[8, 16, 32, 64],
                             depths=[1, 1, 1, 1]),
    "resnet_hf": hf_vision("hf vision", "ResNetConfig", "ResNetModel", embedding_size=8, hidden_sizes=[8, 16, 32, 64],
                           depths=[1, 1, 1, 1], layer_type="basic"),
    "segformer": hf_vision("hf vision", "SegformerConfig", "SegformerForSemanticSegmentation", image_size=IMG,
                           num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                           num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=16, num_labels=3,
                           patch_sizes=[7, 3], strides=[4, 2]),
    "clip_vision": hf_vision("hf vision", "CLIPVisionConfig", "CLIPVisionModel", **VIT),
    # speech
    "wav2vec2": hf_audio("hf speech", "Wav2Vec2Config", "Wav2Vec2Model", "input_values", (BATCH, 400),
                         hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=2),
    "whisper_encoder": hf_audio("hf speech", "WhisperConfig", "WhisperForAudioClassification", "input_features",
                                (BATCH, 16, 60), d_model=32, encoder_layers=2, encoder_attention_heads=2,
                                encoder_ffn_dim=64, num_mel_bins=16, max_source_positions=30, num_labels=3),
}


# ---- timm ----------------------------------------------------------------------------------

def timm_model(make):
    def build():
        model = make().eval()
        return model, (torch.randn(BATCH, 3, IMG, IMG),), ["pixel_values"]
    return "timm", build


def _timm():
    import timm
    from timm.models import byobnet, convnext, efficientnet, mobilenetv3, resnet, vision_transformer
    return timm, resnet, convnext, efficientnet, mobilenetv3, vision_transformer


def t_resnet():
    timm, resnet, *_ = _timm()
    return resnet.ResNet(resnet.Bottleneck, [1, 1, 1, 1], channels=(4, 8, 16, 32), num_classes=10, stem_width=8,
                         stem_type="deep")


def t_convnext():
    _, _, convnext, *_ = _timm()
    return convnext.ConvNeXt(depths=(1, 1, 1, 1), dims=(8, 16, 32, 64), num_classes=10)


def t_efficientnet():
    _, _, _, efficientnet, *_ = _timm()
    return efficientnet._gen_efficientnet("efficientnet_b0", channel_multiplier=0.25, depth_multiplier=0.25,
                                          pretrained=False, num_classes=10)


def t_mobilenetv3():
    _, _, _, _, mobilenetv3, _ = _timm()
    return mobilenetv3._gen_mobilenet_v3("mobilenetv3_small_050", 0.25, pretrained=False, num_classes=10)


def t_vit():
    *_, vision_transformer = _timm()
    return vision_transformer.VisionTransformer(img_size=IMG, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                                                num_classes=10)


def t_deit():
    timm = _timm()[0]
    return timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, img_size=IMG, patch_size=8,
                             embed_dim=32, depth=2, num_heads=2, num_classes=10)


def t_swin():
    timm = _timm()[0]
    return timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=IMG, patch_size=4,
                             embed_dim=16, depths=(1, 1), num_heads=(1, 2), window_size=4, num_classes=10)


def t_mixer():
    from timm.models import mlp_mixer
    return mlp_mixer.MlpMixer(img_size=IMG, patch_size=8, embed_dim=32, num_blocks=2, num_classes=10)


def t_levit():
    timm = _timm()[0]
    return timm.create_model("levit_128s", pretrained=False, img_size=IMG, num_classes=10,
                             embed_dim=(16, 32, 48), key_dim=8, num_heads=(1, 2, 3), depth=(1, 1, 1))


def t_ghostnet():
    from timm.models import ghostnet
    return ghostnet._create_ghostnet("ghostnet_050", width=0.25, pretrained=False, num_classes=10)


def t_rexnet():
    timm = _timm()[0]
    return timm.create_model("rexnet_100", pretrained=False, num_classes=10, width_mult=0.25)


MODELS.update({
    "timm_resnet": timm_model(t_resnet),
    "timm_convnext": timm_model(t_convnext),
    "timm_efficientnet": timm_model(t_efficientnet),
    "timm_mobilenetv3": timm_model(t_mobilenetv3),
    "timm_vit": timm_model(t_vit),
    "timm_deit": timm_model(t_deit),
    "timm_swin": timm_model(t_swin),
    "timm_mixer": timm_model(t_mixer),
    "timm_levit": timm_model(t_levit),
    "timm_ghostnet": timm_model(t_ghostnet),
    "timm_rexnet": timm_model(t_rexnet),
})


# ---- torchvision ---------------------------------------------------------------------------

def tv(family, make, inputs=lambda: (torch.randn(BATCH, 3, IMG, IMG),), wrap=None):
    def build():
        model = make().eval()
        if wrap:
            model = wrap(model)
        return model, inputs(), ["images"]
    return family, build


class Out(torch.nn.Module):
    def __init__(self, model, key):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x):
        return self.model(x)[self.key]


class DetectionOutputs(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        out = self.model(x)[0]
        return out["boxes"], out["scores"], out["labels"]


def tiny_backbone(out_channels=16):
    from collections import OrderedDict
    body = torch.nn.Sequential(OrderedDict(
        c1=torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), r1=torch.nn.ReLU(),
        c2=torch.nn.Conv2d(8, out_channels, 3, stride=2, padding=1), r2=torch.nn.ReLU()))
    body.out_channels = out_channels
    return body


def tv_fcn():
    from torchvision.models.segmentation.fcn import FCN, FCNHead
    from torchvision.models._utils import IntermediateLayerGetter
    return FCN(IntermediateLayerGetter(tiny_backbone(), {"r2": "out"}), FCNHead(16, 3))


def tv_deeplab():
    from torchvision.models.segmentation.deeplabv3 import ASPP, DeepLabV3
    from torchvision.models._utils import IntermediateLayerGetter
    head = torch.nn.Sequential(ASPP(16, [2, 4, 6], out_channels=8), torch.nn.Conv2d(8, 8, 3, padding=1, bias=False),
                               torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 3, 1))
    return DeepLabV3(IntermediateLayerGetter(tiny_backbone(), {"r2": "out"}), head)


def tv_fasterrcnn():
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    anchors = AnchorGenerator(sizes=((8, 16),), aspect_ratios=((0.5, 1.0),))
    from torchvision.ops import MultiScaleRoIAlign
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    return FasterRCNN(tiny_backbone(), num_classes=None, rpn_anchor_generator=anchors, min_size=64, max_size=64,
                      box_roi_pool=MultiScaleRoIAlign(["0"], 4, 2), box_head=TwoMLPHead(16 * 4 * 4, 16),
                      box_predictor=FastRCNNPredictor(16, 3))


def tv_small(name, **kw):
    import torchvision
    return lambda: getattr(torchvision.models, name)(weights=None, num_classes=10, **kw)


MODELS.update({
    "tv_mobilenet_v3": tv("torchvision classification", tv_small("mobilenet_v3_small", width_mult=0.25)),
    "tv_shufflenet": tv("torchvision classification", lambda: __import__("torchvision").models.shufflenetv2.ShuffleNetV2(
        [1, 1, 1], [8, 16, 32, 64, 128], num_classes=10)),
    "tv_mnasnet": tv("torchvision classification",
                     lambda: __import__("torchvision").models.mnasnet.MNASNet(0.25, num_classes=10)),
    "tv_fcn": tv("torchvision segmentation", tv_fcn, wrap=lambda m: Out(m, "out")),
    "tv_deeplabv3": tv("torchvision segmentation", tv_deeplab, wrap=lambda m: Out(m, "out")),
    "tv_fasterrcnn": tv("torchvision detection", tv_fasterrcnn, inputs=lambda: (torch.rand(1, 3, 64, 64),),
                        wrap=DetectionOutputs),
})

EXPORTERS = ("torchscript", "dynamo")


def export(model, args, names, exporter, path):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if exporter == "torchscript":
            torch.onnx.export(model, args, path, dynamo=False, opset_version=17, input_names=names)
        else:
            torch.onnx.export(model, args, path, dynamo=True, input_names=names, external_data=False)
    m = onnx.load(path)
    return max([o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] or [0])


def write_case(d, m_path, feeds, outputs):
    os.makedirs(os.path.join(d, "test_data_set_0"))
    shutil.move(m_path, os.path.join(d, "model.onnx"))
    model = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
    names = [i.name for i in model.graph.input]
    for i, n in enumerate(names):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[n], n).SerializeToString())
    for i, (o, v) in enumerate(zip(model.graph.output, outputs)):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(v), o.name).SerializeToString())


def torch_outputs(model, args):
    with torch.no_grad():
        y = model(*args)
    ys = y if isinstance(y, (tuple, list)) else (y,)
    return [t.detach().numpy() for t in ys]


def one(name, family, build, exporter, out):
    model, args, names = build()
    # PyTorch's outputs first, in eval mode: the TorchScript exporter restores the wrapper's
    # training flag onto every submodule afterwards (dropout on again).
    model.eval()
    want = torch_outputs(model, args)
    tmp = os.path.join(out, f".{name}.{exporter}.onnx")
    try:
        opset = export(model, args, names, exporter, tmp)
    except Exception as e:  # noqa: BLE001 - the reason is the result
        return [name, family, exporter, "-", "export failed", first_line(e), "0"]
    try:
        sess = ort.InferenceSession(tmp, providers=["CPUExecutionProvider"])
        feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
        got = sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        os.remove(tmp)
        return [name, family, exporter, str(opset), "onnxruntime failed", first_line(e), "0"]
    if len(got) != len(want):
        os.remove(tmp)
        return [name, family, exporter, str(opset), "onnxruntime disagrees with pytorch",
                f"{len(got)} outputs, pytorch {len(want)}", "0"]
    for g, w in zip(got, want):
        if g.shape != w.shape or not np.allclose(g, w, rtol=1e-3, atol=1e-4):
            os.remove(tmp)
            err = float(np.max(np.abs(g - w))) if g.shape == w.shape else f"shape {g.shape} vs {w.shape}"
            return [name, family, exporter, str(opset), "onnxruntime disagrees with pytorch", f"max abs err {err}", "0"]
    d = os.path.join(out, f"{name}.{exporter}")
    write_case(d, tmp, feeds, got)
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    return [name, family, exporter, str(opset), "ok", "", str(size)]


def first_line(e):
    text = str(e).strip().splitlines()
    line = next((t for t in text if t.strip()), type(e).__name__)
    return (type(e).__name__ + ": " + line)[:200].replace("\t", " ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = [s for s in a.only.split(",") if s]
    os.makedirs(a.out, exist_ok=True)
    manifest = os.path.join(a.out, "MANIFEST.tsv")
    rows = {}
    if os.path.exists(manifest):
        for line in open(manifest).read().splitlines()[1:]:
            f = line.split("\t")
            rows[(f[0], f[2])] = f
    for name, (family, build) in MODELS.items():
        if only and name not in only:
            continue
        for exporter in EXPORTERS:
            shutil.rmtree(os.path.join(a.out, f"{name}.{exporter}"), ignore_errors=True)
            torch.manual_seed(0)
            try:
                row = one(name, family, build, exporter, a.out)
            except Exception as e:  # noqa: BLE001 - a model that cannot even be built
                traceback.print_exc()
                row = [name, family, exporter, "-", "build failed", first_line(e), "0"]
            rows[(name, exporter)] = row
            print("\t".join(row), flush=True)
    with open(manifest, "w") as f:
        f.write("model\tfamily\texporter\topset\tresult\treason\tbytes\n")
        for key in sorted(rows):
            f.write("\t".join(rows[key]) + "\n")
    total = sum(int(r[6]) for r in rows.values())
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}: "
          f"{sum(r[4] == 'ok' for r in rows.values())} of {len(rows)} cases, {total / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
