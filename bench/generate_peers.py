#!/usr/bin/python3
"""Greedy decoding with a KV cache beside the engines people would pick instead (issue 53):
`mosaic generate` on the zoo's cached decoders against Hugging Face transformers' `generate`
(PyTorch 2, eager) and ONNX Runtime GenAI, on the same shapes, interleaved.

Models (random weights, the zoo's shapes; each engine draws its own, so the tokens differ and
are not compared here: tests/torch/zoo_decoder_agreement.py checks Mosaic's tokens against
PyTorch's on the same weights):
  gpt2-small-kv  GPT-2 small (12 layers, hidden 768, 1,024 positions, tied head): transformers'
                 GPT2LMHeadModel; ONNX Runtime GenAI's model builder has no GPT-2, so none there
  llama-1b       TinyLlama-1.1B's shape (22 layers, hidden 2048, 32 heads, 4 key/value heads,
                 SwiGLU 5632, 32,000 ids): transformers' LlamaForCausalLM, and the same weights
                 turned by onnxruntime_genai.models.builder (float32, CPU) into its ONNX model

--precision bf16: every engine on bfloat16 weights. Mosaic's `generate --precision bf16` (the
products by weights on bfloat16 operands, float32 sums, everything else float32);
transformers with the model loaded in torch.bfloat16 (all of its arithmetic in bfloat16, its
CPU kernels' choice); ONNX Runtime GenAI's builder with `-p bf16 -e cpu`, and where it or its
CPU provider cannot, the engine is missing with the reason.

Each engine runs in its own process, a warm-up then --runs timed generations of --new tokens
from a --prompt-token prompt at each batch; the figures are defined as `mosaic generate`
defines them (docs/generation.md, "The figures"): TTFT, TPOT = (last token's time - first's) /
(new - 1), decode tokens/s = batch x (new - 1) / (last - first). For transformers the token
times are taken by a logits processor, called once per new token after that step's forward;
for ONNX Runtime GenAI after each generate_next_token(). Every engine must return exactly
--new tokens per row (end-of-sequence is disabled). Rounds alternate the engines.

The last columns are the memory's bound: the bytes a decode step must read (Mosaic's
`bandwidth.step_weight_bytes + step_cache_bytes`: the weights once, the cache's past) over the
read bandwidth each Mosaic run measured in its own process right after its timed runs (the
median over rounds), as a step time no engine reading them from memory can beat; and each
peer's TPOT over it: the most any engine could be faster than that peer on this machine.

The peers come from PyPI into --venv (made and filled on first use; torch, transformers,
onnxruntime-genai); nothing of Mosaic's build or tests needs them.

usage: bench/generate_peers.py [--mosaic build/mosaic] [--models gpt2-small-kv,llama-1b]
         [--batches 1,8] [--prompt 16] [--new 32] [--runs 2] [--rounds 2] [--threads 2]
         [--engines mosaic-onednn,transformers,ort-genai] [--venv .peers-venv] [--work DIR]
         [--json docs/perf_generate_peers.json] [--update-docs docs/generation.md]
         [--precision f32|bf16]
  (inside the venv) generate_peers.py worker prepare MODEL DIR PRECISION
  (inside the venv) generate_peers.py worker ENGINE MODEL DIR BATCH PROMPT NEW RUNS THREADS PRECISION
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))

PEER_PACKAGES = {"torch": "torch", "transformers": "transformers", "onnxruntime_genai": "onnxruntime-genai",
                 "numpy": "numpy", "safetensors": "safetensors", "onnx": "onnx", "onnx_ir": "onnx-ir"}
# The zoo's shapes (frontends/zoo/zoo_decoder.cpp) as transformers configurations.
MODELS = {
    "gpt2-small-kv": ("gpt2", dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257,
                                   tie_word_embeddings=True)),
    "llama-1b": ("llama", dict(num_hidden_layers=22, hidden_size=2048, num_attention_heads=32, num_key_value_heads=4,
                               intermediate_size=5632, vocab_size=32000, max_position_embeddings=2048,
                               rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)),
}
ENGINES = ["mosaic-onednn", "mosaic-im2col", "transformers", "ort-genai"]


# ---- inside the peers' environment -------------------------------------------------------

def hf_model(name):
    import torch
    import transformers
    kind, cfg = MODELS[name]
    torch.manual_seed(0)
    if kind == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg))
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg))


def save_word_tokenizer(hf, vocab):
    """A tokenizer of `vocab` made-up words ("t0", "t1", ...) beside the weights: ONNX Runtime
    GenAI's builder loads one from the model's folder (the prompts here are ids, never text)."""
    import tokenizers
    import transformers
    words = {f"t{i}": i for i in range(vocab)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="t0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t1", eos_token="t2")
    fast.save_pretrained(hf)


def og_dir(work, precision):
    return os.path.join(work, "og" if precision == "f32" else "og-" + precision)


def prepare(name, work, precision):
    """WORK/hf: the model in transformers' format; WORK/og (og-bf16): ONNX Runtime GenAI's
    (llama only); with the builder's failure as `og_missing` where it cannot (bf16 on the CPU)."""
    hf = os.path.join(work, "hf")
    if not os.path.exists(os.path.join(hf, "config.json")):
        hf_model(name).eval().save_pretrained(hf, safe_serialization=True)
    og, missing = og_dir(work, precision), None
    if MODELS[name][0] == "llama" and not os.path.exists(os.path.join(og, "genai_config.json")):
        save_word_tokenizer(hf, MODELS[name][1]["vocab_size"])
        r = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf, "-o", og, "-p",
                            "fp32" if precision == "f32" else precision, "-e", "cpu", "-c", os.path.join(work, "og-cache")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0 or not os.path.exists(os.path.join(og, "genai_config.json")):
            if precision == "f32":
                sys.exit(f"generate_peers: ONNX Runtime GenAI's builder failed on {hf}:\n{r.stdout[-3000:]}")
            missing = "its builder failed: " + (r.stdout.strip().splitlines() or ["exit %d" % r.returncode])[-1][:200]
    print(json.dumps({"hf": hf, "og": og if os.path.exists(og) else None, "og_missing": missing}))


def prompt_ids(batch, prompt, vocab):
    import numpy as np
    return np.random.default_rng(7).integers(1, vocab, size=(batch, prompt))


def figures(token_s, batch):
    """TTFT, TPOT (ms) and decode tokens/s of one run from each new token's time (s)."""
    new = len(token_s)
    return {"ttft_ms": token_s[0] * 1e3, "tpot_ms": (token_s[-1] - token_s[0]) / (new - 1) * 1e3,
            "decode_tokens_per_s": batch * (new - 1) / (token_s[-1] - token_s[0])}


def time_transformers(name, work, batch, prompt, new, runs, threads, precision):
    import torch
    import transformers
    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(work, "hf"), dtype=dtype).eval()
    model.generation_config.eos_token_id = None  # exactly `new` tokens, as the other engines
    model.generation_config.pad_token_id = 0
    ids = torch.tensor(prompt_ids(batch, prompt, model.config.vocab_size))
    mask = torch.ones_like(ids)

    class Clock(transformers.LogitsProcessor):
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores):
            self.times.append(time.perf_counter())
            return scores

    out = []
    for run in range(runs + 1):  # the first is the warm-up
        clock = Clock()
        with torch.inference_mode():
            t0 = time.perf_counter()
            seq = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                                 use_cache=True, logits_processor=transformers.LogitsProcessorList([clock]))
        if seq.shape[1] != prompt + new or len(clock.times) != new:
            sys.exit(f"generate_peers: transformers returned {seq.shape[1] - prompt} new tokens, not {new}")
        if run:
            out.append(figures([t - t0 for t in clock.times], batch))
    return {"version": f"transformers {transformers.__version__}, torch {torch.__version__}", "runs": out}


def time_ort_genai(work, batch, prompt, new, runs, threads, precision):
    import numpy as np
    import onnxruntime_genai as og
    folder = og_dir(work, precision)
    cfg_path = os.path.join(folder, "genai_config.json")
    cfg = json.load(open(cfg_path))
    opts = cfg["model"]["decoder"].setdefault("session_options", {})
    opts["intra_op_num_threads"], opts["inter_op_num_threads"] = threads, 1
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    model = og.Model(folder)
    vocab = cfg["model"]["vocab_size"]
    ids = prompt_ids(batch, prompt, vocab).astype(np.int32)
    out = []
    for run in range(runs + 1):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=prompt + new, min_length=prompt + new, do_sample=False, batch_size=batch)
        t0 = time.perf_counter()
        gen = og.Generator(model, params)
        gen.append_tokens(ids)
        times = []
        while not gen.is_done():
            gen.generate_next_token()
            times.append(time.perf_counter())
        got = gen.get_sequence(0)
        if len(times) != new or len(got) != prompt + new:
            sys.exit(f"generate_peers: ONNX Runtime GenAI returned {len(times)} new tokens, not {new}")
        del gen
        if run:
            out.append(figures([t - t0 for t in times], batch))
    return {"version": f"onnxruntime-genai {og.__version__}", "runs": out}


def worker(argv):
    if argv[0] == "prepare":
        return prepare(argv[1], argv[2], argv[3])
    engine, name, work = argv[0], argv[1], argv[2]
    batch, prompt, new, runs, threads = (int(a) for a in argv[3:8])
    precision = argv[8]
    if engine == "transformers":
        doc = time_transformers(name, work, batch, prompt, new, runs, threads, precision)
    else:
        doc = time_ort_genai(work, batch, prompt, new, runs, threads, precision)
    print(json.dumps(doc))


# ---- the driver ---------------------------------------------------------------------------

def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.run(["/usr/bin/python3", "-m", "venv", venv], check=True)
    for mod, pkg in PEER_PACKAGES.items():
        if subprocess.run([py, "-c", f"import {mod}"], capture_output=True).returncode:
            print(f"installing {pkg} from PyPI into {venv} ...", file=sys.stderr, flush=True)
            subprocess.run([py, "-m", "pip", "install", "--progress-bar", "off", pkg], check=True,
                           stdout=subprocess.DEVNULL)
    return py


def run_json(cmd, who):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"generate_peers: {who} failed (exit {r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def mosaic_runs(args, backend, name, batch):
    from bench_docs import mosaic_json
    doc = mosaic_json(args.mosaic, ["generate", f"zoo:{name}", "--backend", backend, "--batch", str(batch),
                                    "--prompt-tokens", str(args.prompt), "--new-tokens", str(args.new), "--runs",
                                    str(args.runs), "--threads", str(args.threads), "--precision", args.precision],
                      "generate_peers")
    if doc.get("decoding") != "kv-cache":
        sys.exit(f"generate_peers: zoo:{name} did not decode with its cache ({doc.get('decoding')})")
    runs = []
    for r in doc["runs"]:
        t = [ms / 1e3 for ms in r["token_ms"]]
        if len(t) != args.new:
            sys.exit(f"generate_peers: mosaic generated {len(t)} tokens, not {args.new}")
        runs.append(figures(t, batch))
    build = doc["provenance"]["build"]
    version = (f"Mosaic {build['git_commit'][:7]}{' (uncommitted changes)' if build['git_dirty'] else ''}, "
               f"oneDNN {build['versions'].get('oneDNN', '?')}")
    bw = doc.get("bandwidth") or {}
    bound = None
    if bw.get("read_bandwidth_gbs"):
        # The bytes a step must read, over the read bandwidth this run measured right after its
        # timed runs: no engine's step that reads them from memory can be shorter.
        bound = {"step_bytes": bw["step_weight_bytes"] + bw["step_cache_bytes"],
                 "read_bandwidth_gbs": bw["read_bandwidth_gbs"]}
    return {"version": version, "runs": runs, "bound": bound}


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def markdown(doc):
    engines = doc["engines"]
    peers = [p for p in engines if not p.startswith("mosaic")]
    # The memory's bound (a step reading its bytes at the read bandwidth Mosaic's runs measured),
    # and how far above each peer any engine could be: where a peer is close to the bound, a
    # ratio over it is capped by the machine, not by the engines.
    bounded = any(row.get("bound") for row in doc["rows"])
    head = ("| model | batch | " + " | ".join(f"{e} TTFT / TPOT ms, decode tok/s" for e in engines) +
            " | " + " | ".join(f"{m} / {p}" for m in engines if m.startswith("mosaic")
                               for p in engines if not p.startswith("mosaic")) +
            ("".join([" | a step at the read bandwidth, ms"] + [f" | the most over {p}" for p in peers])
             if bounded else "") + " |")
    lines = [f"{doc['cpu']}, {doc['threads']} threads, {doc['date']}; prompt {doc['prompt']}, {doc['new']} new "
             f"tokens, greedy, random weights, {doc.get('precision', 'f32')} weights; medians of {doc['rounds']} interleaved rounds x {doc['runs']} runs "
             f"(`bench/generate_peers.py`). The ratios are decode tokens/s. Versions: "
             + "; ".join(f"{k}: {v}" for k, v in doc["versions"].items()) + ".", "", head,
             "|" + "---|" * (2 + len(engines) + sum(1 for m in engines if m.startswith("mosaic")
                                                   for p in engines if not p.startswith("mosaic")) +
                             ((1 + len(peers)) if bounded else 0))]
    for row in doc["rows"]:
        cells = []
        for e in engines:
            r = row["engines"].get(e)
            cells.append("-" if not r else f"{r['ttft_ms']:.0f} / {r['tpot_ms']:.1f}, {r['decode_tokens_per_s']:.1f}")
        ratios = []
        for m in engines:
            for p in engines:
                if m.startswith("mosaic") and not p.startswith("mosaic"):
                    a, b = row["engines"].get(m), row["engines"].get(p)
                    ratios.append(f"**{a['decode_tokens_per_s'] / b['decode_tokens_per_s']:.2f}x**" if a and b else "-")
        bound = row.get("bound")
        if bounded:
            if bound:
                ratios.append(f"{bound['step_ms']:.1f} ({bound['read_bandwidth_gbs']:.1f} GB/s)")
                for p in peers:
                    r = row["engines"].get(p)
                    ratios.append(f"{r['tpot_ms'] / bound['step_ms']:.2f}x" if r else "-")
            else:
                ratios += ["-"] * (1 + len(peers))
        lines.append(f"| {row['model']} | {row['batch']} | " + " | ".join(cells + ratios) + " |")
    for e, why in sorted(doc.get("missing", {}).items()):
        lines.append(f"\n{e}: missing ({why}).")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        return worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--models", default="gpt2-small-kv,llama-1b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--engines", default="mosaic-onednn,transformers,ort-genai")
    ap.add_argument("--venv", default=os.path.join(ROOT, ".peers-venv"))
    ap.add_argument("--work", default="/tmp/mosaic-generate-peers")
    ap.add_argument("--json", default="")
    ap.add_argument("--update-docs", default="")
    ap.add_argument("--marker", default="generate-peers", help="the name of the --update-docs markers")
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16"], help="every engine's weights (module doc)")
    args = ap.parse_args()
    models, engines = args.models.split(","), args.engines.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    for bad in [m for m in models if m not in MODELS] + [e for e in engines if e not in ENGINES]:
        sys.exit(f"generate_peers: unknown model or engine '{bad}' (models: {list(MODELS)}; engines: {ENGINES})")
    if args.new < 2 or args.prompt < 1 or args.runs < 1 or args.rounds < 1 or args.threads < 1 or min(batches) < 1:
        sys.exit("generate_peers: --new must be at least 2; --prompt, --runs, --rounds, --threads and batches positive")
    sys.path.insert(0, HERE)
    from bench_docs import cpu_description, replace_table, write_json
    py = ensure_venv(args.venv) if any(not e.startswith("mosaic") for e in engines) else None
    work, missing = {}, {}
    for m in models:
        work[m] = os.path.join(args.work, m)
        os.makedirs(work[m], exist_ok=True)
        if py:
            got = run_json([py, os.path.abspath(__file__), "worker", "prepare", m, work[m], args.precision],
                           f"preparing {m}")
            if got.get("og_missing") and "ort-genai" in engines:
                missing["ort-genai"] = f"{m} in {args.precision}: {got['og_missing']}"
    samples, versions, bounds = {}, {}, {}
    for rnd in range(args.rounds):
        for m in models:
            for b in batches:
                for e in engines:
                    if (e == "ort-genai" and MODELS[m][0] != "llama") or e in missing:
                        continue
                    if e.startswith("mosaic"):
                        got = mosaic_runs(args, e.split("-", 1)[1], m, b)
                    else:
                        try:
                            got = run_json([py, os.path.abspath(__file__), "worker", e, m, work[m], str(b),
                                            str(args.prompt), str(args.new), str(args.runs), str(args.threads),
                                            args.precision], f"{e} on {m}")
                        except SystemExit as failed:
                            if args.precision == "f32":
                                raise
                            # A peer that cannot run bfloat16 weights here is missing, with why.
                            missing[e] = f"{m} in {args.precision}: " + str(failed).strip().splitlines()[-1][:200]
                            continue
                    versions[e] = got["version"]
                    if got.get("bound"):
                        bounds.setdefault((m, b), []).append(got["bound"])
                    samples.setdefault((m, b, e), []).extend(got["runs"])
                    r = got["runs"][-1]
                    print(f"round {rnd + 1}: {m} batch {b} {e}: TTFT {r['ttft_ms']:.0f} ms, TPOT {r['tpot_ms']:.1f} ms, "
                          f"{r['decode_tokens_per_s']:.1f} tok/s", file=sys.stderr, flush=True)
    rows = []
    for m in models:
        for b in batches:
            row = {"model": m, "batch": b, "engines": {}}
            for e in engines:
                if (m, b, e) in samples:
                    s = samples[(m, b, e)]
                    row["engines"][e] = {k: median_of(s, k) for k in ("ttft_ms", "tpot_ms", "decode_tokens_per_s")}
                    row["engines"][e]["samples"] = s
            if (m, b) in bounds:
                got = bounds[(m, b)]
                gbs = statistics.median(g["read_bandwidth_gbs"] for g in got)
                row["bound"] = {"step_bytes": got[0]["step_bytes"], "read_bandwidth_gbs": gbs,
                                "step_ms": got[0]["step_bytes"] / gbs / 1e6, "samples": got}
            rows.append(row)
    doc = {"schema": "mosaic.generate_peers/1", "cpu": cpu_description(), "threads": args.threads,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "prompt": args.prompt, "new": args.new,
           "runs": args.runs, "rounds": args.rounds, "engines": engines, "versions": versions, "rows": rows,
           "precision": args.precision, "missing": missing}
    table = markdown(doc)
    print(table)
    if args.json:
        write_json(args.json, doc)
    if args.update_docs:
        replace_table(args.update_docs, args.marker, table, "generate_peers")


if __name__ == "__main__":
    main()
