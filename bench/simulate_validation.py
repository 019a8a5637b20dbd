#!/usr/bin/python3
"""`mosaic simulate` against measured data-parallel runs on this machine.

For each model, in one run:
  1. the network: `mpirun -np N mosaic simulate --measure-network` for each N > 1 (measured at
     the rank count it predicts: on one host the transfers are CPU work, time-shared when
     ranks outnumber cores);
  2. predicted: `mosaic simulate zoo:MODEL --profile-concurrency C --network NET_N --ranks N
     --ranks-per-node N --cores-per-node CORES --mode MODES`, twice: C = 1 (the compute profile
     of one process alone, slowed by N/CORES when ranks outnumber cores) and C = N (N training
     benchmarks at once, as N ranks share the cores and memory; the slowest one used). The two
     bracket the contention a real run sees;
  3. measured: `mpirun -np N mosaic bench zoo:MODEL --mode training --distributed MODE` for
     N = 1, 2, 4 (4 ranks share the 2 cores: --oversubscribe) and each MODE.
Every point is predicted and then measured --repeats times in alternation, and the error of
each (prediction, measurement) pair taken: this 2-vCPU machine's speed drifts by 10-20% over
minutes, which pairing cancels; the median pair error is reported. Error = predicted /
measured global images/s - 1, the prediction being the one whose profile ran N benchmarks at
once (the co-location N ranks have); the single-process profile's is shown beside it. The 1-rank point checks the profile against
an independent run of the same step (run-to-run noise); 2 and 4 ranks check the cost model.
Prints a Markdown table; --json keeps everything (docs/simulate_validation.json).

usage: bench/simulate_validation.py [--mosaic build/mosaic] [--models vgg16-cifar,alexnet-cifar]
        [--modes allreduce,allreduce-blocking] [--ranks 1,2,4] [--batch 32] [--iterations 10]
        [--repeats 3] [--json F]
       bench/simulate_validation.py --summarize F   (the tables again, from F's stored pairs)
"""
import argparse
import json
import os
import subprocess
import tempfile

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMP_NUM_THREADS": "1", "MOSAIC_PROGRESS": "0"}


def med(xs):
    return sorted(xs)[len(xs) // 2]


def summarize_row(r):
    """Medians over the (prediction, measurement) pairs of one point. The prediction is the
    one whose profile ran N benchmarks at once (the co-location N ranks have); "alone" is the
    single-process profile's, for comparison."""
    ps = r["pairs"]
    r["measured_images_per_s"] = med([q["measured"] for q in ps])
    r["predicted_images_per_s"] = med([q["shared"] for q in ps])
    r["predicted_alone_images_per_s"] = med([q["alone"] for q in ps])
    r["error"] = med([q["shared"] / q["measured"] - 1 for q in ps])
    r["error_alone"] = med([q["alone"] / q["measured"] - 1 for q in ps])
    for k in ("middle", "error_shared", "predicted_shared_images_per_s", "in_band"):
        r.pop(k, None)
        for q in ps:
            q.pop(k, None)


def run(cmd, env):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--models", default="vgg16-cifar,alexnet-cifar")
    ap.add_argument("--modes", default="allreduce,allreduce-blocking")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--summarize", metavar="FILE", help="recompute the tables of an earlier --json FILE from its pairs")
    args = ap.parse_args()
    if args.summarize:
        with open(args.summarize) as f:
            doc = json.load(f)
        for r in doc["rows"]:
            summarize_row(r)
        settings = argparse.Namespace(**dict(doc["settings"], json=args.json or args.summarize, summarize=None))
        report(doc["rows"], settings, doc["networks"])
        return
    env = dict(os.environ, **MPI_ENV)
    ranks = [int(r) for r in args.ranks.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        networks, nets = {}, {}
        for n in sorted(set(max(n, 2) for n in ranks)):
            runs = []
            for k in range(args.repeats):
                path = os.path.join(tmp, f"net{n}-{k}.json")
                run(["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none", args.mosaic, "simulate",
                     "--measure-network", "--network-out", path], env)
                with open(path) as f:
                    runs.append((json.load(f)["bandwidth_bps"], path))
            nets[n] = sorted(runs)[len(runs) // 2][1]  # the median-bandwidth measurement
            with open(nets[n]) as f:
                networks[n] = json.load(f)
        nets = {n: nets[max(n, 2)] for n in ranks}
        for model in args.models.split(","):
            common = ["zoo:" + model, "--batch", str(args.batch), "--threads", "1", "--iterations",
                      str(args.iterations), "--warmup", "3"]
            modes = args.modes.split(",")
            # Each repeat predicts and then measures every point at once, so the machine's drift
            # (this VM's speed moves by 10-20% over minutes) hits both sides of a pair alike.
            pairs = {}
            for k in range(args.repeats):
                for n in ranks:
                    predicted = {}
                    for conc in sorted({1, n}):
                        sim = os.path.join(tmp, f"{model}-{n}-{conc}-{k}-sim.json")
                        run([args.mosaic, "simulate"] + common + ["--backend", "onednn", "--profile-concurrency",
                             str(conc), "--network", nets[n], "--ranks", str(n), "--ranks-per-node", str(n),
                             "--cores-per-node", str(args.cores), "--mode", args.modes, "--json", sim], env)
                        with open(sim) as f:
                            for p in json.load(f)["predictions"]:
                                predicted[(p["mode"], conc)] = p
                    for mode in modes:
                        out = os.path.join(tmp, f"{model}-{mode}-{n}-{k}.json")
                        run(["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none", args.mosaic, "bench"] +
                            common + ["--mode", "training", "--backends", "onednn", "--no-check", "--no-db", "--no-peaks",
                                      "--distributed", mode, "--json", out], env)
                        with open(out) as f:
                            doc = json.load(f)
                        pairs.setdefault((mode, n), []).append({
                            "measured": doc["distributed"]["onednn"]["global_images_per_s"],
                            "others_cpu": doc["runs"][0]["summary"].get("others_cpu"),
                            "alone": predicted[(mode, 1)]["images_per_s"], "shared": predicted[(mode, n)]["images_per_s"],
                            "exposed_ms": predicted[(mode, 1)]["exposed_ms"]})
            for mode in modes:
                for n in ranks:
                    rows.append({"model": model, "mode": mode, "ranks": n, "pairs": pairs[(mode, n)]})
                    summarize_row(rows[-1])
                    r = rows[-1]
                    print(f"{model:14s} {mode:20s} {n} ranks: measured {r['measured_images_per_s']:7.1f}  predicted "
                          f"{r['predicted_images_per_s']:7.1f} images/s (profile alone {r['predicted_alone_images_per_s']:7.1f})  "
                          f"paired error {100 * r['error']:+.1f}% (alone {100 * r['error_alone']:+.1f}%)", flush=True)
    report(rows, args, networks)


def report(rows, args, networks):
    print("\n| model | mode | ranks | measured images/s | predicted | error | profile alone: predicted | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['mode']} | {r['ranks']} | {r['measured_images_per_s']:.1f} | "
              f"{r['predicted_images_per_s']:.1f} | {100 * r['error']:+.1f}% | {r['predicted_alone_images_per_s']:.1f} | "
              f"{100 * r['error_alone']:+.1f}% |")
    worst = max(abs(r["error"]) for r in rows)
    within = sum(abs(r["error"]) <= 0.15 for r in rows)
    print(f"\nworst |error| {100 * worst:.1f}%; {within} of {len(rows)} points within 15%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "networks": networks, "worst_abs_error": worst, "within_15_percent": within,
                       "settings": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
