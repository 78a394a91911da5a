"""Gradients from Python against central finite differences (float64), and the grad-mode switches."""
import numpy as np
import pytest
import tessera as ts

rng = np.random.default_rng(3)

FUNCS = {
    "tanh_sum": lambda x: ts.tanh(x).sum(),
    "softmax_log": lambda x: (ts.log_softmax(x, -1) * ts.arange(4, dtype=ts.float64)).sum(),
    "matmul": lambda x: (x @ x.T).pow(2.0).mean(),
    "gelu_sigmoid": lambda x: (ts.gelu(x) * ts.sigmoid(x)).sum(),
    "indexing": lambda x: (x[1:, ::2] * 3).sum() + x[:, [0, 3]].pow(2.0).sum(),
    "layer_norm": lambda x: (ts.nn.functional.layer_norm(x, (4,)) * x).sum(),
    "max_div": lambda x: (x.amax(1) / (x.abs() + 1).sum()).sum(),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_gradient_matches_finite_differences(name):
    fn = FUNCS[name]
    a = rng.standard_normal((3, 4))
    x = ts.tensor(a, dtype=ts.float64, requires_grad=True)
    fn(x).backward()
    analytic = x.grad.numpy()
    numeric = np.zeros_like(a)
    eps = 1e-6
    for i in np.ndindex(a.shape):
        hi, lo = a.copy(), a.copy()
        hi[i] += eps
        lo[i] -= eps
        numeric[i] = (fn(ts.tensor(hi, dtype=ts.float64)).item() - fn(ts.tensor(lo, dtype=ts.float64)).item()) / (2 * eps)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_grad_modes_and_hooks():
    w = ts.ones(3, requires_grad=True)
    with ts.no_grad():
        y = w * 2
    assert not y.requires_grad and ts.is_grad_enabled()

    @ts.no_grad()
    def frozen(v):
        return v * 3

    assert not frozen(w).requires_grad
    seen = []
    z = w * 5
    z.register_hook(lambda g: seen.append(g.tolist()))
    z.sum().backward()
    assert seen == [[1.0, 1.0, 1.0]] and w.grad.tolist() == [5.0, 5.0, 5.0]
    doubled = ts.ones(2, requires_grad=True)
    h = doubled * 1
    h.register_hook(lambda g: g * 2)  # a returned tensor replaces the gradient
    h.sum().backward()
    assert doubled.grad.tolist() == [2.0, 2.0]
    assert z.grad_fn is not None and w.grad_fn is None and w.is_leaf
    w.grad = None
    assert w.grad is None
