"""mosaic.bench, verify, gradcheck and train against what the library computes and against
independent values: the naive oracle's check, ONNX's expected outputs, planted bugs."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import mosaic


def test_backends_and_version():
    assert mosaic.__version__ == mosaic.version()
    assert mosaic.backends()[0] == "naive"
    assert "sgd" in mosaic.optimizers()


def test_bench_checks_every_backend_against_naive_and_reports_per_node_times():
    r = mosaic.bench("zoo:fmnist-cnn", backends=["naive", "onednn"], batch=2, iterations=3, warmup=1, peaks=False)
    assert r["schema"].startswith("mosaic.bench/")
    assert r["checks_ok"] is True and r["checked"] == "outputs"
    labels = [run["label"] for run in r["runs"]]
    assert labels == ["naive", "onednn"]
    onednn = r["runs"][1]
    assert onednn["check"]["performed"] and onednn["check"]["passed"]
    assert onednn["check"]["max_abs_error"] < 1e-3
    assert onednn["iterations"]["measured"] == 3
    convs = [n for n in onednn["nodes"] if n["op"] == "Conv"]
    assert convs and all(n["median_us"] > 0 for n in convs)
    assert convs[0]["output_shape"] == "[2,32,28,28]"


def test_bench_string_lists_and_paths_are_accepted():
    r = mosaic.bench("zoo:fmnist-cnn", backends="naive", batch=1, iterations=1, warmup=0, peaks=False)
    assert [run["label"] for run in r["runs"]] == ["naive"]


def test_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'.*batch"):
        mosaic.bench("zoo:fmnist-cnn", batchsize=2)


def test_wrong_type_is_a_type_error_naming_the_argument():
    with pytest.raises(TypeError, match="argument 'batch' must be int, not str"):
        mosaic.bench("zoo:fmnist-cnn", batch="2")
    with pytest.raises(TypeError, match="argument 'check' must be bool"):
        mosaic.bench("zoo:fmnist-cnn", check=1)
    with pytest.raises(ValueError, match="argument 'threads' is out of range"):
        mosaic.bench("zoo:fmnist-cnn", threads=2**40)
    with pytest.raises(ValueError, match="argument 'seed' is out of range"):
        mosaic.bench("zoo:fmnist-cnn", seed=-1)
    with pytest.raises(TypeError, match=r"argument 'backends'\[1\] must be str"):
        mosaic.bench("zoo:fmnist-cnn", backends=["naive", 3])


def test_bad_values_raise_invalid_argument_naming_them():
    with pytest.raises(ValueError, match="unknown backend 'onednnn'.*did you mean onednn"):
        mosaic.bench("zoo:fmnist-cnn", backends=["onednnn"])
    with pytest.raises(mosaic.Error, match="no-such-model.onnx"):
        mosaic.bench("/nonexistent/no-such-model.onnx", backends=["naive"])


def test_verify_against_onnx_expected_outputs(node_tests):
    r = mosaic.verify([os.path.join(node_tests, "test_relu"), os.path.join(node_tests, "test_softmax_axis_1")],
                      backend="onednn")
    assert r["failed"] == 0 and r["passed"] == 2
    assert {c["verdict"] for c in r["cases"]} == {"PASSED"}


def test_verify_per_node_and_determinism_are_library_calls():
    # Each node alone against naive, forward and (logits [N, 10]) the training step's backward.
    r = mosaic.verify_per_node("zoo:fmnist-cnn", backend="onednn", batch=2)
    assert r["agree"] and r["ran"] > 0
    (onednn,) = r["backends"]
    assert onednn["backend"] == "onednn" and onednn["forward"]["first_divergent"] is None
    assert onednn["backward"] is not None
    assert {n["op"] for n in onednn["forward"]["nodes"]} >= {"Conv", "Gemm"}
    # A training step repeated on fresh plans: the naive oracle repeats bit for bit.
    d = mosaic.verify_determinism("zoo:fmnist-cnn", backend="naive", batch=2, threads=2)
    assert d["repeats"] and d["threads"] == 2
    assert all(row["repeat_max_ulp"] == 0 for row in d["backends"][0]["gradients"])
    with pytest.raises(mosaic.InvalidArgument, match="deterministic"):
        mosaic.verify_per_node("zoo:fmnist-cnn", deterministic=True)


def test_quantize_writes_a_qdq_model_and_its_accuracy_cost(tmp_path):
    out = tmp_path / "q.onnx"
    r = mosaic.quantize("zoo:fmnist-cnn", data="synthetic:64,1,28,28,10", output=str(out), backend="naive",
                        method="entropy", exclude=[])
    assert out.exists() and r["schema"] == "mosaic.quantize/1" and r["output"] == str(out)
    assert r["weights"] >= 3 and r["accuracy"]["rows"] > 0 and r["accuracy"]["top1_agreement"] > 0.9
    assert r["method"] == "entropy" and len(r["noise"]) > 0
    with pytest.raises(ValueError, match="samples"):
        mosaic.quantize("zoo:fmnist-cnn", samples=0)


def test_generate_returns_the_tokens_and_their_times():
    r = mosaic.generate("zoo:gpt2-tiny", backend="naive", prompt_ids=[3, 4, 5], new_tokens=6, runs=2, batch=2,
                        temperature=1.0, seed=5)
    assert r["schema"] == "mosaic.generate/1" and r["prompt"] == [[3, 4, 5], [3, 4, 5]]
    assert len(r["generated"]) == 2 and all(len(row) == 6 for row in r["generated"])
    assert len(r["runs"]) == 2 and all(len(run["token_ms"]) == 6 for run in r["runs"])
    assert r["summary"]["ttft_ms"] > 0 and r["summary"]["decode_tokens_per_s"] > 0
    # The bandwidth share, against the machine's read bandwidth (the peaks cache).
    bw = r["bandwidth"]
    assert bw["step_weight_bytes"] > 0 and bw["read_bandwidth_gbs"] > 0
    assert bw["share"] == pytest.approx(bw["step_gbs"] / bw["read_bandwidth_gbs"], rel=1e-9)
    assert bw["step_gbs"] == pytest.approx(bw["step_weight_bytes"] / (r["summary"]["tpot_ms"] / 1e3) / 1e9, rel=1e-9)
    with pytest.raises(ValueError, match="new_tokens"):
        mosaic.generate("zoo:gpt2-tiny", new_tokens=0)
    assert r["settings"]["precision"] == "f32"
    with pytest.raises(ValueError, match="backend naive declines it"):
        mosaic.generate("zoo:gpt2-tiny", backend="naive", precision="bf16")


def test_two_generations_are_compared_and_drawn(tmp_path):
    a, b = (mosaic.generate("zoo:gpt2-tiny-kv", backend="naive", prompt_tokens=4, new_tokens=6, runs=2, peaks=False)
            for _ in range(2))
    c = mosaic.compare(a, b)
    assert c["schema"] == "mosaic.compare/1" and c["kind"] == "generate"
    assert [k["label"] for k in c["configs"]] == ["decode step", "first token"]
    assert c["configs"][0]["time_ms"]["n_a"] == 10 and c["configs"][1]["time_ms"]["verdict"] == "too few samples"
    assert c["slower"] == (c["configs"][0]["time_ms"]["verdict"] == "SLOWER")
    with pytest.raises(ValueError, match="differ in backend"):
        mosaic.compare(a, mosaic.generate("zoo:gpt2-tiny-kv", backend="im2col", prompt_tokens=4, new_tokens=6, runs=2,
                                       peaks=False))
    pooled = mosaic.generate("zoo:gpt2-tiny-kv", backend="naive", prompt_tokens=4, new_tokens=4, runs=1, processes=2,
                             peaks=False)
    assert len(pooled["processes"]) == 2 and len(pooled["runs"]) == 2 and pooled["settings"]["processes"] == 2
    r = mosaic.report(a, output=tmp_path / "g.html")
    assert r["runs"] == 1 and r["figures"] == 1  # the latency CDF (one depth: no tokens/s vs depth)
    assert "Inter-token latency CDF" in (tmp_path / "g.html").read_text()


def test_loadgen_runs_the_scenarios_and_refuses_as_the_cli_does():
    r = mosaic.loadgen("zoo:fmnist-cnn", scenario="single-stream", backend="onednn", min_queries=50, min_duration=0)
    assert r["schema"] == "mosaic.loadgen/1" and r["scenario"] == "single-stream"
    (run,) = r["runs"]
    assert run["queries"] == 50 and len(run["query_latency_ms"]) == 50 and run["percentile"] == 0.9
    assert run["estimate_ms"] >= run["latency_ms"]["p90"] and r["metric"]["value"] == run["estimate_ms"]
    off = mosaic.loadgen("zoo:fmnist-cnn", scenario="offline", backend="onednn", batch=4, workers=2, min_queries=40,
                         min_duration=0)
    assert off["workers"] == 2 and off["runs"][0]["samples"] == 4 * off["runs"][0]["queries"] >= 40
    with pytest.raises(ValueError, match="`rate` is for the server scenario"):
        mosaic.loadgen("zoo:fmnist-cnn", scenario="offline", rate=5)
    with pytest.raises(ValueError, match="argument .rate. must be >= 0, got -1"):
        mosaic.loadgen("zoo:fmnist-cnn", scenario="server", rate=-1)
    gen = mosaic.loadgen("zoo:gpt2-tiny", scenario="server", generate=True, rate=50, min_queries=6, min_duration=0,
                         prompt_tokens="uniform:2-6", new_tokens="3", ttft_bound=1e6, backend="onednn")
    g = gen["generation"]
    assert len(g["requests"]) == 6 and all(q["new_tokens"] == 3 and 2 <= q["prompt_tokens"] <= 6 for q in g["requests"])
    assert g["goodput"] == 1.0 and gen["metric"]["value"] == 1.0
    assert all(q["ttft_ms"] <= q["e2e_ms"] for q in g["requests"])
    with pytest.raises(ValueError, match="expected N or uniform:A-B"):
        mosaic.loadgen("zoo:gpt2-tiny", scenario="server", generate=True, rate=5, new_tokens="uniform:3")


def test_gradcheck_passes_a_correct_backend_and_catches_a_planted_bug():
    # Fewer probes than the default (the options reach the check): still a verdict per tensor.
    ok = mosaic.gradcheck("zoo:fmnist-cnn", backend="onednn", directions=1, elements=2)
    assert ok["exit_code"] == 0 and ok["summary"]["passed"] == len(ok["tensors"])
    bad = mosaic.gradcheck("zoo:fmnist-cnn", backend="naive", plant="conv-dw-scale", directions=1, elements=2)
    assert bad["exit_code"] == 1


def test_train_returns_the_log_and_learns():
    log = mosaic.train("zoo:fmnist-cnn", optimizer="momentum", lr=0.05, steps=60, batch=32, seed=3,
                       eval_batch=1000)
    losses = [s["loss"] for s in log["steps"]]
    assert len(losses) == 60
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:10]) / 10


def test_ctrl_c_stops_a_long_call_with_keyboard_interrupt():
    code = ("import mosaic\n"
            "print('ready', flush=True)\n"
            "try:\n"
            "    mosaic.bench('zoo:fmnist-cnn', backends=['naive'], batch=8, iterations=10**8, max_seconds=600,"
            " peaks=False, check=False)\n"
            "except KeyboardInterrupt:\n"
            "    print('stopped cleanly', flush=True)\n"
            "    raise SystemExit(7)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"  # imported: the SIGINT must reach the call
    time.sleep(1.5)
    start = time.time()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert "stopped cleanly" in out, (out, err)
    assert p.returncode == 7, err  # the exception was caught: no signal death, no crash
    assert time.time() - start < 60


def test_plan_shows_placement_fallbacks_and_conversions():
    p = mosaic.plan("zoo:fmnist-cnn", assign="Conv=onednn,*=naive", batch=4)
    assert p["schema"] == "mosaic.plan/1" and p["batch"] == 4
    by_node = {s["node"]: s for s in p["steps"] if not s["conversion"]}
    assert by_node["conv1+relu1"]["backend"] == "onednn" if "conv1+relu1" in by_node else by_node["conv1"]["backend"] == "onednn"
    assert by_node["pool1"]["backend"] == "naive"
    # onednn's outputs read by naive nodes: every conversion is a step with the bytes it moves.
    conversions = [s for s in p["steps"] if s["conversion"]]
    assert len(conversions) == p["conversions"]
    assert p["conversion_bytes"] == sum(s["bytes"] for s in conversions)
    with pytest.raises(ValueError, match="`mode` must be inference or training, not 'train'"):
        mosaic.plan("zoo:fmnist-cnn", mode="train")


def test_info_counts_parameters_and_flops():
    r = mosaic.info("zoo:fmnist-cnn", batch=4)
    assert r["schema"] == "mosaic.info/1" and r["batch"] == 4
    # The parameters listed by shape add up to the parameter count.
    assert sum(np.prod(p["shape"]) for p in r["parameters"]) == r["parameter_count"]
    assert r["weight_bytes"] == 4 * r["parameter_count"]
    conv1 = next(n for n in r["nodes"] if n["name"] == "conv1")
    assert conv1["output_shape"] == [4, 32, 28, 28] and "naive" in conv1["backends"]
    assert r["flops"] == pytest.approx(sum(n["flops"] for n in r["nodes"]))
    with pytest.raises(mosaic.Error, match="no-such.onnx"):
        mosaic.info("no-such.onnx")


def test_compare_two_bench_reports_and_the_results_store(tmp_path):
    common = dict(backends=["onednn"], batch=2, iterations=30, warmup=2, peaks=False)
    a = mosaic.bench("zoo:fmnist-cnn", **common)
    b = mosaic.bench("zoo:fmnist-cnn", **common)
    c = mosaic.compare(a, b)
    assert c["schema"] == "mosaic.compare/1"
    assert isinstance(c["slower"], bool)
    # A different batch is a different computation: refused unless forced.
    other = mosaic.bench("zoo:fmnist-cnn", **dict(common, batch=4))
    with pytest.raises(mosaic.Error, match="differ in batch"):
        mosaic.compare(a, other)
    assert mosaic.compare(a, other, force=True)["schema"] == "mosaic.compare/1"
    with pytest.raises(ValueError, match="argument 'alpha' must be in"):
        mosaic.compare(a, b, alpha=2.0)
    # The store: the CLI records, history lists, compare reads by id.
    db = str(tmp_path / "runs.sqlite")
    cli = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "mosaic")
    if not os.path.exists(cli):
        pytest.skip("the CLI is not in build/")
    env = dict(os.environ, MOSAIC_DB="")
    for _ in range(2):
        subprocess.run([cli, "bench", "zoo:fmnist-cnn", "--backends", "onednn", "--batch", "2", "--iterations", "10",
                        "--warmup", "1", "--no-peaks", "--quiet", "--db", db], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = mosaic.history(db=db)
    assert [r["kind"] for r in runs] == ["bench", "bench"] and runs[0]["id"] > runs[1]["id"]
    assert mosaic.run_document(runs[0]["id"], db=db)["schema"].startswith("mosaic.bench/")
    c = mosaic.compare(runs[1]["id"], "last", db=db)
    assert c["schema"] == "mosaic.compare/1"
    with pytest.raises(ValueError, match="`kind` must be bench, train, sweep, generate or loadgen"):
        mosaic.history(db=db, kind="benches")


def test_simulate_predicts_what_the_cli_predicts_from_the_same_profile(tmp_path, cli):
    profile = mosaic.bench("zoo:fmnist-cnn", backends="onednn", mode="training", batch=8, iterations=3, warmup=1,
                           peaks=False)
    options = dict(ranks=[1, 2, 8], modes=["allreduce", "ps"], network="10gbe")
    r = mosaic.simulate(profile, **options)
    assert r["schema"] == "mosaic.simulate/1" and r["backend"] == "onednn" and r["batch"] == 8
    by = {(p["mode"], p["ranks"]): p for p in r["predictions"]}
    assert by[("allreduce", 1)]["speedup"] == pytest.approx(1.0)  # one rank is the baseline
    assert "error" in by[("ps", 1)]  # a parameter server needs a worker besides it
    assert 1 < by[("allreduce", 8)]["speedup"] < 8
    # The CLI on the same profile, written as its --json: the same predictions.
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    out = tmp_path / "simulate.json"
    subprocess.run([cli, "simulate", str(path), "--ranks", "1,2,8", "--mode", "allreduce,ps", "--network", "10gbe",
                    "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
    assert json.loads(out.read_text())["predictions"] == r["predictions"]
    assert mosaic.simulate(str(path), **options)["predictions"] == r["predictions"]
    # Profiled now, in a child mosaic process.
    measured = mosaic.simulate("zoo:fmnist-cnn", batch=4, iterations=2, warmup=1, ranks=[1, 4])
    assert measured["profile"].startswith("measured now") and len(measured["predictions"]) == 2
    with pytest.raises(ValueError, match="`groups`: '3x' is not NnMc"):
        mosaic.simulate(profile, groups=["3x"])
    with pytest.raises(ValueError, match="`modes`: unknown mode 'foo'"):
        mosaic.simulate(profile, modes="foo")
    with pytest.raises(TypeError, match=r"argument 'ranks'\[1\] must be int"):
        mosaic.simulate(profile, ranks=[1, "2"])
    with pytest.raises(ValueError, match="not a training benchmark"):
        mosaic.simulate(mosaic.bench("zoo:fmnist-cnn", backends="onednn", batch=2, iterations=1, peaks=False))


def test_bench_in_independent_processes_pools_their_samples():
    r = mosaic.bench("zoo:fmnist-cnn", backends="onednn", batch=2, iterations=5, warmup=1, peaks=False, processes=2)
    assert r["checks_ok"] and r["config"]["processes"] == 2 and len(r["processes"]) == 2
    run = r["runs"][0]
    assert len(run["samples"]["iteration_ms"]) == 10  # 5 per process, pooled
    assert run["iteration_ms"]["median"] == pytest.approx(float(np.median(run["samples"]["iteration_ms"])))
    with pytest.raises(ValueError, match="`csv` and `trace` describe one process"):
        mosaic.bench("zoo:fmnist-cnn", backends="onednn", processes=2, trace="t.json")


def test_find_max_batch_fits_the_limit_and_the_next_batch_does_not():
    r = mosaic.bench("zoo:fmnist-cnn", backends="im2col", find_max_batch=True, memory_limit="64M")
    assert r["schema"] == "mosaic.max-batch/1" and r["limit_bytes"] == 64 * 1024 * 1024
    c = r["configs"][0]
    assert c["max_batch"] > 1 and c["accounted_bytes"] <= r["limit_bytes"]
    if c["limited_by"] == "accounting":
        assert c["next_accounted_bytes"] > r["limit_bytes"]
    with pytest.raises(ValueError, match="`memory_limit` '4X': unknown unit 'X'"):
        mosaic.bench("zoo:fmnist-cnn", backends="im2col", find_max_batch=True, memory_limit="4X")


SWEEP = """name: py
output: {output}
data: synthetic:32,1,28,28,10
models: zoo:fmnist-cnn
backends: [naive]
optimizers: [sgd, adam]
lr: 0.01
batch: 8
epochs: 1
steps_per_epoch: 2
threads: 1
"""


def test_sweep_runs_resumes_and_trains_as_the_cli_does(tmp_path, cli):
    config = tmp_path / "py.yaml"
    config.write_text(SWEEP.format(output=tmp_path / "py-out"))
    first = mosaic.sweep(config, max_cells=1)
    assert first["schema"] == "mosaic.sweep/1" and first["ran"] == 1 and first["stopped"] and not first["complete"]
    rest = mosaic.sweep(str(config))
    assert rest["ran"] == 1 and rest["cached"] == 1 and rest["complete"] and len(rest["cells"]) == 2
    assert (tmp_path / "py-out" / "table2.md").exists() and (tmp_path / "py-out" / "table3.csv").exists()
    # The CLI on the same grid in another folder: the same losses, cell by cell (naive, one thread).
    other = tmp_path / "cli.yaml"
    other.write_text(SWEEP.format(output=tmp_path / "cli-out"))
    subprocess.run([cli, "sweep", str(other), "--no-db"], check=True, stdout=subprocess.DEVNULL)
    by_cli = json.loads((tmp_path / "cli-out" / "sweep.json").read_text())["cells"]
    for a, b in zip(rest["cells"], by_cli):
        assert (a["optimizer"], a["status"]) == (b["optimizer"], b["status"]) == (a["optimizer"], "done")
        assert [s["loss"] for s in a["log"]["steps"]] == pytest.approx([s["loss"] for s in b["log"]["steps"]], rel=1e-6)
    with pytest.raises(ValueError, match="more than `max_grid` 1; raise `max_grid`"):
        mosaic.sweep(config, max_grid=1)
    with pytest.raises(mosaic.Error, match="missing.yaml"):
        mosaic.sweep(tmp_path / "missing.yaml")


def test_report_draws_runs_given_as_documents_and_files(tmp_path):
    bench = mosaic.bench("zoo:fmnist-cnn", backends=["naive", "onednn"], batch=2, iterations=3, warmup=1, peaks=False)
    log = mosaic.train("zoo:fmnist-cnn", data="synthetic:32,1,28,28,10", steps=4, batch=8, evaluate=False)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench))
    out = tmp_path / "report.html"
    r = mosaic.report(bench, log, path, output=out, title="from <python>")
    assert r["runs"] == 2 and r["figures"] >= 2 and r["output"] == str(out)
    assert any("again; drawn once" in n for n in r["notes"])  # the file is the first document
    page = out.read_text()
    assert "<title>from &lt;python&gt;</title>" in page and page.count("data:image/svg+xml;base64,") == r["figures"]
    with pytest.raises(ValueError, match="document 1 is not a bench, train, sweep or generate report"):
        mosaic.report({"schema": "other"}, output=tmp_path / "x.html")
    with pytest.raises(ValueError, match="at least one run"):
        mosaic.report(output=tmp_path / "x.html")
    assert not (tmp_path / "x.html").exists()


def test_export_writes_the_zoo_model_as_onnx(tmp_path):
    path = tmp_path / "cnn.onnx"
    description = mosaic.export("zoo:fmnist-cnn", path, seed=3)
    assert "fmnist" in description.lower() or "fashion" in description.lower(), description
    from_file, from_zoo = mosaic.info(str(path), batch=2), mosaic.info("zoo:fmnist-cnn", batch=2)
    assert from_file["parameters"] == from_zoo["parameters"] and from_file["flops"] == from_zoo["flops"]
    with pytest.raises(mosaic.Error, match="unknown zoo model 'no-such-model' .known: .*fmnist-cnn"):
        mosaic.export("no-such-model", tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="is a directory"):
        mosaic.export("fmnist-cnn", tmp_path)


def test_the_compare_example_plots_each_backends_node_times(tmp_path, capsys):
    import compare_backends
    out = tmp_path / "nodes.png"
    code = compare_backends.main(["--zoo", "fmnist-cnn", "--backends", "naive,onednn", "--batch", "2", "--iterations", "3",
                                  "--out", str(out)])
    assert code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    printed = capsys.readouterr().out
    info = mosaic.info("zoo:fmnist-cnn", batch=2)
    drawn = [line.split()[0] for line in printed.splitlines()[2:] if line and not line.startswith(("whole", "plot"))]
    # Each drawn node is a node of the model, or a fusion of some ("conv1+relu1").
    parts = {part for name in drawn for part in name.split("+")}
    assert drawn and parts <= {n["name"] for n in info["nodes"]}, (drawn, printed)
    assert {"conv1", "conv2", "fc2"} <= parts
