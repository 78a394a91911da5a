"""Ops from Python against NumPy, on every device of this build."""
import numpy as np
import pytest
import tessera as ts

rng = np.random.default_rng(7)
A = rng.standard_normal((3, 4)).astype(np.float32)
B = rng.standard_normal((3, 4)).astype(np.float32)
POS = (np.abs(A) + 0.5).astype(np.float32)

UNARY = {
    "exp": np.exp, "log": lambda a: np.log(np.abs(a) + 0.5), "sqrt": lambda a: np.sqrt(np.abs(a) + 0.5), "tanh": np.tanh,
    "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "abs": np.abs, "neg": np.negative, "relu": lambda a: np.maximum(a, 0),
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "square": np.square, "sign": np.sign,
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum, "minimum": np.minimum}


def t(a, device):
    return ts.tensor(a, device=device)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, device):
    src = np.abs(A) + 0.5 if name in ("log", "sqrt") else A
    want = UNARY[name](A) if name not in ("log", "sqrt") else (np.log(src) if name == "log" else np.sqrt(src))
    got = getattr(ts, name)(t(src, device)).cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    method = getattr(t(src, device), name)().cpu().numpy()
    np.testing.assert_array_equal(method, got)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_and_broadcast(name, device):
    fn = getattr(ts, name)
    np.testing.assert_allclose(fn(t(A, device), t(POS, device)).cpu().numpy(), BINARY[name](A, POS), rtol=1e-6)
    row = POS[:1]
    np.testing.assert_allclose(fn(t(A, device), t(row, device)).cpu().numpy(), BINARY[name](A, row), rtol=1e-6)
    np.testing.assert_allclose(fn(t(A, device), 2.5).cpu().numpy(), BINARY[name](A, np.float32(2.5)), rtol=1e-6)
    np.testing.assert_allclose(fn(2.5, t(POS, device)).cpu().numpy(), BINARY[name](np.float32(2.5), POS), rtol=1e-6)


def test_operators(device):
    x, y = t(A, device), t(POS, device)
    for got, want in [(x + y, A + POS), (x - 1, A - 1), (2 * x, 2 * A), (x / y, A / POS), (1 / y, 1 / POS), (-x, -A), (x ** 2, A ** 2),
                      (x @ y.T, A @ POS.T), ((x > 0), A > 0), ((x <= y), A <= POS), ((x == x), A == A)]:
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-6)
    z = t(A, device)
    z += 1
    np.testing.assert_allclose(z.cpu().numpy(), A + 1, rtol=1e-6)
    i = ts.tensor([5, -7, 9], device=device)
    np.testing.assert_array_equal((i // 2).cpu().numpy(), np.array([5, -7, 9]) // 2)
    np.testing.assert_array_equal((i % 4).cpu().numpy(), np.array([5, -7, 9]) % 4)
    np.testing.assert_array_equal((i & 3).cpu().numpy(), np.array([5, -7, 9]) & 3)


def test_reductions(device):
    x = t(A, device)
    np.testing.assert_allclose(x.sum().item(), A.sum(), rtol=1e-5)
    np.testing.assert_allclose(ts.sum(x, dim=1).cpu().numpy(), A.sum(1), rtol=1e-5)
    np.testing.assert_allclose(x.mean((0, 1), keepdim=True).cpu().numpy(), A.mean(keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(x.amax(0).cpu().numpy(), A.max(0))
    values, indices = x.max(1)
    np.testing.assert_allclose(values.cpu().numpy(), A.max(1))
    np.testing.assert_array_equal(indices.cpu().numpy(), A.argmax(1))
    np.testing.assert_array_equal(x.argmax().item(), A.argmax())
    np.testing.assert_allclose(x.var(1).cpu().numpy(), A.var(1, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(ts.std(x, 0, correction=0).cpu().numpy(), A.std(0), rtol=1e-5)
    e = np.exp(A - A.max(1, keepdims=True))
    np.testing.assert_allclose(x.softmax(-1).cpu().numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(ts.cumsum(x, 1).cpu().numpy(), np.cumsum(A, 1), rtol=1e-5, atol=1e-6)
    s = ts.sort(x, dim=1, descending=True)
    np.testing.assert_allclose(s.values.cpu().numpy(), -np.sort(-A, 1))
    np.testing.assert_allclose(ts.norm(x).item(), np.linalg.norm(A), rtol=1e-5)


def test_shape_ops_and_linalg(device):
    x = t(A, device)
    np.testing.assert_array_equal(x.reshape(4, 3).cpu().numpy(), A.reshape(4, 3))
    np.testing.assert_array_equal(x.T.cpu().numpy(), A.T)
    np.testing.assert_array_equal(x.unsqueeze(0).shape, (1, 3, 4))
    np.testing.assert_array_equal(ts.cat([x, x], 1).cpu().numpy(), np.concatenate([A, A], 1))
    np.testing.assert_array_equal(ts.stack([x, x]).cpu().numpy(), np.stack([A, A]))
    parts = ts.split(x, 2, dim=1)
    assert [p.shape for p in parts] == [(3, 2), (3, 2)]
    np.testing.assert_allclose(ts.matmul(x, x.T).cpu().numpy(), A @ A.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ts.einsum("ij,kj->ik", x, x).cpu().numpy(), A @ A.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ts.where(x > 0, x, 0.0).cpu().numpy(), np.where(A > 0, A, 0), rtol=1e-6)
    np.testing.assert_allclose(x.clamp(-0.5, 0.5).cpu().numpy(), np.clip(A, -0.5, 0.5))


def test_creation_dtypes_and_devices(device):
    z = ts.zeros(2, 3, dtype=ts.float64, device=device)
    assert z.shape == (2, 3) and z.dtype == ts.float64 and str(z.device) == ts.device(device).__str__()
    assert ts.ones((2,), dtype="int32").dtype == ts.int32
    assert ts.arange(5).dtype == ts.int64 and ts.arange(0.0, 1.0, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert ts.tensor([[1, 2], [3, 4]]).dtype == ts.int64
    assert ts.tensor([1.5]).dtype == ts.float32
    assert ts.tensor(np.zeros(2, np.float64)).dtype == ts.float64
    assert ts.tensor([True, False]).dtype == ts.bool
    h = ts.tensor(A, device=device).to(ts.float16)
    np.testing.assert_allclose(h.cpu().numpy(), A.astype(np.float16))
    assert ts.full((2, 2), 7).dtype == ts.int64 and ts.full((2, 2), 7.0).dtype == ts.float32
    assert ts.eye(3).tolist()[1] == [0.0, 1.0, 0.0]
    moved = ts.tensor(A).to(device)
    np.testing.assert_array_equal(moved.cpu().numpy(), A)


def test_nn_functional(device):
    F = ts.nn.functional
    x = ts.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), device=device)
    w = ts.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), device=device)
    y = F.conv2d(x, w, padding=1)
    assert y.shape == (2, 4, 8, 8)
    assert F.conv2d(x, w, padding="same").shape == (2, 4, 8, 8)
    assert F.max_pool2d(y, 2).shape == (2, 4, 4, 4)
    logits = ts.tensor([[2.0, 0.5, -1.0]], device=device)
    target = ts.tensor([0], device=device)
    p = np.exp([2.0, 0.5, -1.0])
    np.testing.assert_allclose(F.cross_entropy(logits, target).item(), -np.log(p[0] / p.sum()), rtol=1e-5)
    ln = F.layer_norm(ts.tensor(A, device=device), (4,)).cpu().numpy()
    want = (A - A.mean(1, keepdims=True)) / np.sqrt(A.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln, want, rtol=1e-4, atol=1e-5)


def test_more_ops(device):
    ts.manual_seed(2)
    draws = ts.bernoulli(0.25, (4000,), device=device)
    assert abs(draws.mean().item() - 0.25) < 0.03 and draws.dtype == ts.float32
    probs = ts.full((2000,), 0.5, device=device)
    assert abs(ts.bernoulli(probs).mean().item() - 0.5) < 0.05
    assert ts.cast(t(A, device), ts.int32).dtype == ts.int32
    x = t(A, device)
    idx = ts.tensor([[0, 3], [1, 1], [2, 0]], device=device)
    np.testing.assert_array_equal(ts.take_along_axis(x, idx, 1).cpu().numpy(), np.take_along_axis(A, idx.cpu().numpy(), 1))
    np.testing.assert_array_equal(x.where(x > 0, ts.zeros_like(x)).cpu().numpy(), np.where(A > 0, A, 0))
    acc = ts.zeros(3, 2, device=device)
    acc.scatter_add_(0, ts.tensor([[0, 1], [0, 2]], device=device), ts.ones(2, 2, device=device))
    assert acc.cpu().tolist() == [[2.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
    img = ts.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), device=device)
    values, where_max = ts.nn.functional.max_pool2d(img, 2, return_indices=True)
    assert values.cpu().tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]] and where_max.cpu().tolist() == [[[[5, 7], [13, 15]]]]
    assert ts.nn.functional.dropout_add(x, x, p=0.0).cpu().tolist() == (x * 2).cpu().tolist()
    assert ts.scalar_tensor(3, dtype=ts.int64).item() == 3
