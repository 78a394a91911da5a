"""Indexing and assignment with PyTorch's semantics (checked against torch where torch and NumPy differ)."""
import numpy as np
import pytest
import tessera as ts

torch = pytest.importorskip("torch")
BASE = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
KEYS = [
    1, -1, (1, 2), (slice(None), 1), (Ellipsis, 2), (None, 1), (slice(1, None), None, slice(None, None, 2)), (slice(-2, None), Ellipsis, 0),
    ([0, 2],), (slice(None), [1, 3]), (1, slice(None), [0, 4]), (0, slice(None), [1, 2]), (slice(None), [0, 1], [1, 2]),
    ([0, 1], slice(None), [1, 2]), ([[0], [2]], [1, 3]), (slice(None), slice(None), [-1, 0]), (Ellipsis, None, [0]),
]


def as_torch(key):
    if isinstance(key, tuple):
        return tuple(as_torch(k) for k in key)
    return torch.tensor(key) if isinstance(key, list) else key


def as_tessera(key):
    if isinstance(key, tuple):
        return tuple(as_tessera(k) for k in key)
    return ts.tensor(key) if isinstance(key, list) else key


@pytest.mark.parametrize("key", KEYS, ids=[str(k) for k in KEYS])
def test_getitem_matches_torch(key, device):
    want = torch.from_numpy(BASE.copy())[as_torch(key)].numpy()
    x = ts.tensor(BASE, device=device)
    np.testing.assert_array_equal(x[key].cpu().numpy(), want)  # lists as index
    np.testing.assert_array_equal(x[as_tessera(key)].cpu().numpy(), want)  # tensors as index


@pytest.mark.parametrize("key", KEYS, ids=[str(k) for k in KEYS])
def test_setitem_matches_torch(key, device):
    want = torch.from_numpy(BASE.copy())
    shape = want[as_torch(key)].shape
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1000
    want[as_torch(key)] = torch.from_numpy(values)
    x = ts.tensor(BASE, device=device)
    x[key] = ts.tensor(values, device=device)
    np.testing.assert_array_equal(x.cpu().numpy(), want.numpy())
    y = ts.tensor(BASE, device=device)
    y[key] = -1.0
    w = torch.from_numpy(BASE.copy())
    w[as_torch(key)] = -1.0
    np.testing.assert_array_equal(y.cpu().numpy(), w.numpy())


def test_bool_masks_and_errors(device):
    x = ts.tensor(BASE, device=device)
    np.testing.assert_array_equal(x[x > 30].cpu().numpy(), BASE[BASE > 30])
    x[x > 30] = 0.0
    np.testing.assert_array_equal(x.cpu().numpy(), np.where(BASE > 30, 0, BASE))
    with pytest.raises(ts.Error, match="out of bounds"):
        x[3]
    with pytest.raises(ts.Error, match="too many indices"):
        x[0, 0, 0, 0]
    with pytest.raises(ts.Error, match="out of bounds"):
        x[:, [0, 9]]
