"""A user optimizer written in Python: Lion (Chen et al., "Symbolic Discovery of Optimization
Algorithms", 2023), validated by mosaic.optcheck and then used to train Fashion-MNIST.

    PYTHONPATH=build/python python3 examples/python/lion_optimizer.py [--steps N]

Rule: c = b1 m + (1 - b1) g;  p -= lr (sign(c) + wd p);  m = b2 m + (1 - b2) g
(the same rule as the C++ plugin in examples/custom_optimizer/lion.cpp).
"""
import argparse
import sys

import numpy as np

import mosaic


class Lion(mosaic.Optimizer):
    name = "lion-py"
    state_names = ["exp_avg"]
    hyperparameters = ["b1", "b2"]

    def __init__(self, config):
        super().__init__(config)
        self.b1 = config.get("b1", 0.9)
        self.b2 = config.get("b2", 0.99)
        self.wd = config["weight_decay"]
        self.c = None  # scratch, reused across parameters of the same size

    def step(self, p, g, state, t):
        m = state["exp_avg"]
        c = self.b1 * m + (1 - self.b1) * g
        p -= self.lr * (np.sign(c) + self.wd * p)
        m *= self.b2
        m += (1 - self.b2) * g


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="training steps on Fashion-MNIST")
    ap.add_argument("--check-steps", type=int, default=20, help="steps of optcheck's network check")
    args = ap.parse_args()
    checks = mosaic.optcheck(Lion, lr=1e-3, steps=args.check_steps)
    for c in checks["checks"]:
        print(f"{c['verdict']:<5} {c['check']:<40} {c['detail']}")
    print(f"optcheck: {checks['passed']} passed, {checks['failed']} failed, {checks['skipped']} skipped")
    if checks["failed"]:
        return 1
    log = mosaic.train("zoo:fmnist-cnn", optimizer=Lion, lr=1e-4, hyperparameters={"b2": 0.99},
                       steps=args.steps, batch=64, seed=1, progress=True)
    epoch = log["epochs"][-1]
    print(f"trained {args.steps} steps with {Lion.name}: train loss {epoch['train_loss']:.4f}, "
          f"test accuracy {epoch['test_accuracy']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
