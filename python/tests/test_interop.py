"""Zero-copy exchange with NumPy and PyTorch (the same data pointer both ways)."""
import numpy as np
import pytest
import tessera as ts

torch = pytest.importorskip("torch")


def ptr(a):
    return a.__array_interface__["data"][0]


def test_numpy_round_trip_shares_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ts.from_numpy(a)
    assert t.data_ptr() == ptr(a) and t.shape == (3, 4) and t.dtype == ts.float32
    t[1, 2] = -1.0  # writes through to the array
    assert a[1, 2] == -1.0
    back = t.numpy()
    assert ptr(back) == ptr(a)
    back[0, 0] = 42
    assert t[0, 0].item() == 42
    for dt in (np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8, np.bool_):
        arr = np.ones((2, 3), dtype=dt)
        tt = ts.from_numpy(arr)
        assert tt.data_ptr() == ptr(arr)
        assert tt.numpy().dtype == arr.dtype and ptr(tt.numpy()) == ptr(arr)
    view = ts.from_numpy(a)[:, 1::2]  # strided views export their strides
    np.testing.assert_array_equal(view.numpy(), a[:, 1::2])


def test_numpy_refusals():
    ro = np.ones(3, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ts.Error, match="read-only"):
        ts.from_numpy(ro)
    with pytest.raises(ts.Error, match="bfloat16"):
        ts.ones(2, dtype=ts.bfloat16).numpy()
    with pytest.raises(ts.Error, match="requires grad"):
        ts.ones(2, requires_grad=True).numpy()
    np.testing.assert_array_equal(np.asarray(ts.ones(2, dtype=ts.bfloat16).float()), np.ones(2, np.float32))


def test_torch_dlpack_round_trip_shares_memory():
    t = ts.arange(0.0, 6.0).reshape(2, 3)
    tt = torch.utils.dlpack.from_dlpack(t)
    assert tt.data_ptr() == t.data_ptr() and tuple(tt.shape) == (2, 3) and tt.dtype == torch.float32
    tt[0, 0] = 9.0
    assert t[0, 0].item() == 9.0
    src = torch.randn(4, 5)
    mine = ts.from_dlpack(src)
    assert mine.data_ptr() == src.data_ptr()
    src[1, 1] = 123.0
    assert mine[1, 1].item() == 123.0
    cap = torch.utils.dlpack.to_dlpack(src)
    assert ts.from_dlpack(cap).data_ptr() == src.data_ptr()
    with pytest.raises(ts.Error, match="consumed"):
        ts.from_dlpack(cap)
    ints = ts.from_dlpack(torch.arange(5))
    assert ints.dtype == ts.int64 and ints.tolist() == [0, 1, 2, 3, 4]


def test_dlpack_lifetime():
    t = ts.randn(1000)
    tt = torch.utils.dlpack.from_dlpack(t)
    expected = tt.clone()
    del t  # torch's reference keeps the storage alive
    assert torch.equal(tt, expected)
    src = torch.randn(100)
    mine = ts.from_dlpack(src)
    keep = src.clone()
    del src
    assert np.array_equal(mine.numpy(), keep.numpy())


def test_devices_without_dlpack_say_so():
    for d in ts.info()["devices"]:
        if d.startswith(("emulated", "kokkos")):
            with pytest.raises(ts.Error, match="DLPack"):
                ts.ones(2, device=d).__dlpack_device__()
