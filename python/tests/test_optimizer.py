"""Python optimizers validated as C++ ones are: optcheck's trajectories against the double-
precision reference rules pass correct classes and catch planted bugs; training with one
matches the built-in rule step by step; errors inside step() surface with their traceback."""
import numpy as np
import pytest

import mosaic


class Momentum(mosaic.Optimizer):
    """PyTorch's SGD with momentum, dampening, nesterov and weight decay, in NumPy."""
    name = "py-momentum"
    state_names = ["momentum_buffer"]
    plant = None

    def __init__(self, config):
        super().__init__(config)
        self.mu, self.damp = config["momentum"], config["dampening"]
        self.nesterov, self.wd = config["nesterov"], config["weight_decay"]

    def step(self, p, g, state, t):
        b = state["momentum_buffer"]
        d = g + self.wd * p if self.plant != "no-weight-decay" else g.copy()
        if t == 1 and self.plant != "damped-first-step":
            b[:] = d
        else:
            b *= self.mu
            b += (1 - self.damp) * d
        d = d + self.mu * b if self.nesterov else b
        if self.plant == "sign":
            p += self.lr * d
        elif self.plant == "last-element":
            p[:-1] -= self.lr * d[:-1]
        else:
            p -= self.lr * d


class Adam(mosaic.Optimizer):
    name = "py-adam"
    state_names = ["exp_avg", "exp_avg_sq"]
    plant = None

    def __init__(self, config):
        super().__init__(config)
        self.b1, self.b2, self.wd = config["beta1"], config["beta2"], config["weight_decay"]
        self.eps = 1e-8 if config["eps"] < 0 else config["eps"]

    def step(self, p, g, state, t):
        m, v = state["exp_avg"], state["exp_avg_sq"]
        g = g + self.wd * p
        m *= self.b1
        m += (1 - self.b1) * g
        v *= self.b2
        v += (1 - self.b2) * g * g
        c1 = 1 - self.b1 ** t if self.plant != "no-bias-correction" else 1.0
        c2 = 1 - self.b2 ** t
        p -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


def planted(cls, bug):
    return type(f"{cls.__name__}_{bug}", (cls,), {"name": f"{cls.name}-{bug}", "plant": bug})


def trajectory_verdicts(result):
    return {c["check"]: c["verdict"] for c in result["checks"] if c["check"].startswith("trajectory")}


@pytest.mark.parametrize("cls,reference", [(Momentum, "sgd"), (Adam, "adam")])
def test_a_correct_python_optimizer_passes_optcheck(cls, reference):
    r = mosaic.optcheck(cls, reference=reference, model="none")
    verdicts = trajectory_verdicts(r)
    assert verdicts and set(verdicts.values()) == {"PASS"}, r["checks"]
    assert r["failed"] == 0, r["checks"]


@pytest.mark.parametrize("cls,reference,bug", [
    (Momentum, "sgd", "no-weight-decay"),
    (Momentum, "sgd", "damped-first-step"),
    (Momentum, "sgd", "sign"),
    (Momentum, "sgd", "last-element"),
    (Adam, "adam", "no-bias-correction"),
])
def test_planted_bugs_in_a_python_optimizer_are_caught(cls, reference, bug):
    r = mosaic.optcheck(planted(cls, bug), reference=reference, model="none")
    assert "FAIL" in trajectory_verdicts(r).values(), r["checks"]
    assert r["failed"] > 0


def test_training_with_a_python_optimizer_matches_the_builtin_rule():
    common = dict(lr=0.05, momentum=0.9, steps=15, batch=16, seed=5, deterministic=True, threads=1,
                  evaluate=False, shuffle=False)
    builtin = mosaic.train("zoo:fmnist-cnn", optimizer="momentum", **common)
    python = mosaic.train("zoo:fmnist-cnn", optimizer=Momentum, **common)
    a = np.array([s["loss"] for s in builtin["steps"]])
    b = np.array([s["loss"] for s in python["steps"]])
    assert len(a) == len(b) == 15
    np.testing.assert_allclose(b, a, rtol=2e-5)
    assert python["optimizer"] == "py-momentum" and builtin["optimizer"] == "momentum"


def test_python_optimizer_under_several_threads():
    # The GIL is taken for each step(): a pure-Python optimizer under --threads 2 runs its
    # steps one at a time while the kernels use both threads.
    log = mosaic.train("zoo:fmnist-cnn", optimizer=Momentum, lr=0.05, momentum=0.9, steps=5, batch=16,
                       threads=2, evaluate=False)
    assert len(log["steps"]) == 5


def test_an_exception_in_step_surfaces_with_its_traceback():
    class Broken(Momentum):
        name = "py-broken"

        def step(self, p, g, state, t):
            raise ZeroDivisionError("planted in step")

    with pytest.raises(mosaic.Error, match="py-broken.*planted in step") as info:
        mosaic.train("zoo:fmnist-cnn", optimizer=Broken, steps=2, batch=8, evaluate=False)
    cause = info.value.__cause__
    assert isinstance(cause, ZeroDivisionError)
    assert cause.__traceback__ is not None


def test_the_gradient_is_read_only():
    class Writes(Momentum):
        name = "py-writes-gradient"

        def step(self, p, g, state, t):
            g[0] = 0

    with pytest.raises(mosaic.Error, match="read-only") as info:
        mosaic.train("zoo:fmnist-cnn", optimizer=Writes, steps=1, batch=8, evaluate=False)
    assert isinstance(info.value.__cause__, ValueError)


def test_unknown_hyperparameter_is_refused():
    from lion_optimizer import Lion
    with pytest.raises(mosaic.Error, match="has no hyperparameter 'b3'.*b1, b2"):
        mosaic.train("zoo:fmnist-cnn", optimizer=Lion, hyperparameters={"b3": 0.5}, steps=1, evaluate=False)


def test_registration_checks_the_class():
    with pytest.raises(TypeError, match="mosaic.Optimizer subclass"):
        mosaic.register_optimizer(object)

    class NoName(mosaic.Optimizer):
        pass

    with pytest.raises(ValueError, match="name must be a non-empty str"):
        mosaic.register_optimizer(NoName)

    class Clash(mosaic.Optimizer):
        name = "adam"

    with pytest.raises(ValueError, match="already exists"):
        mosaic.register_optimizer(Clash)


class Hoarder(mosaic.Optimizer):
    """Plain SGD that keeps every array it is handed (as a careless class might, for logging)."""
    name = "py-hoarder"
    state_names = ["seen"]
    kept = []

    def step(self, p, g, state, t):
        p -= self.lr * g
        state["seen"] += 1
        Hoarder.kept.append((p, g, state["seen"]))


def test_arrays_kept_past_the_step_are_copies_a_write_to_which_raises():
    # Before, the arrays were views of Mosaic's buffers: a write after train() returned (the
    # parameters freed) was heap corruption ("corrupted double-linked list") or SIGSEGV.
    Hoarder.kept = []
    log = mosaic.train("zoo:fmnist-cnn", optimizer=Hoarder, lr=0.01, data="synthetic:32,1,28,28,10", batch=16,
                       epochs=1, evaluate=False)
    assert log["epochs"][0]["train_loss"] > 0
    assert len(Hoarder.kept) >= 2
    p, g, seen = Hoarder.kept[-1]
    assert np.isfinite(p).all() and np.isfinite(g).all()  # reading is safe: the memory is the array's
    assert seen.min() >= 1  # the state was copied back and in again at each step
    for a in (p, g, seen):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 1.0
