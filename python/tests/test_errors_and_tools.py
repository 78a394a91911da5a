"""Bad input raises tessera.Error naming the op and the shapes (the interpreter survives), and
the runtime tools answer from Python."""
import threading

import numpy as np
import pytest
import tessera as ts


@pytest.mark.parametrize("call, pattern", [
    (lambda: ts.matmul(ts.ones(2, 3), ts.ones(2, 3)), r"matmul.*\[2, 3\]"),
    (lambda: ts.ones(2, 3) + ts.ones(4), r"add.*\[2, 3\].*\[4\]"),
    (lambda: ts.ones(2, 3).view(4), r"view"),
    (lambda: ts.ones(2, dtype="nope"), r"dtype"),
    (lambda: ts.ones(2, device="cuda:7"), r"cuda"),
    (lambda: ts.nn.functional.cross_entropy(ts.ones(2, 3), ts.ones(2)), r"cross_entropy"),
    (lambda: ts.ones(2, 2).item(), r"item"),
    (lambda: ts.nn.Linear(3, 2)(ts.ones(2, 4)), r"\[2, 4\]"),
    (lambda: ts.nn.functional.conv2d(ts.ones(1, 3, 4, 4), ts.ones(2, 2, 3, 3)), r"conv2d"),
    (lambda: ts.nn.functional.mse_loss(ts.ones(2), ts.ones(2), reduction="avg"), r"reduction"),
    (lambda: ts.from_dlpack(object()), r"from_dlpack"),
])
def test_bad_input_raises_with_the_engine_message(call, pattern):
    with pytest.raises(ts.Error, match=pattern):
        call()
    assert ts.ones(1).item() == 1.0  # the interpreter and the engine carry on


def test_error_hierarchy():
    assert issubclass(ts.Error, RuntimeError) and issubclass(ts.OutOfMemoryError, ts.Error)


def test_threads_run_ops_concurrently():
    """Ops release the GIL: two Python threads each run a chain of matmuls; both finish with the
    same results as one thread (a deadlock or a crash fails the test)."""
    a = ts.randn(128, 128)
    want = None
    results = [None, None]

    def work(i):
        x = a
        for _ in range(20):
            x = ts.tanh(x @ a)
        results[i] = x.numpy()

    work(0)
    want = results[0].copy()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, want)


def test_info_and_bench():
    info = ts.info()
    assert "cpu:0" in info["devices"] and any(b["name"] == "cpu" for b in info["backends"])
    records = ts.bench.run(backends=["cpu"], suites=["elementwise"], quick=True, filters=["add/f32"])
    assert records, "the elementwise suite has an f32 add case"
    r = records[0]
    assert r["backend"] == "cpu" and r["median_s"] > 0 and r["status"] in ("ok", "unchecked")
    assert "elementwise" in ts.bench.suites()


def test_optimizers_and_schedules():
    w = ts.tensor([1.0, -2.0], requires_grad=True)
    for make in (lambda p: ts.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: ts.optim.Adam(p, lr=0.1),
                 lambda p: ts.optim.AdamW([{"params": p, "lr": 0.1}]), lambda p: ts.optim.RMSprop(p, lr=0.01)):
        p = [w.detach().clone().requires_grad_()]
        opt = make(p)
        for _ in range(3):
            (p[0] * p[0]).sum().backward()
            opt.step()
            opt.zero_grad()
        assert abs(p[0][0].item()) < 1.0  # moved toward the minimum
    opt = ts.optim.SGD([w], lr=1.0)
    sched = ts.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(4):
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)
    opt.param_groups[0]["lr"] = 0.125
    assert opt.param_groups[0]["lr"] == 0.125


def test_autocast_and_grad_scaler():
    x = ts.randn(4, 8)
    w = ts.randn(8, 8, requires_grad=True)
    with ts.amp.autocast(dtype=ts.bfloat16):
        y = x @ w
    assert y.dtype == ts.bfloat16
    scaler = ts.amp.GradScaler(init_scale=1024.0)
    opt = ts.optim.SGD([w], lr=0.1)
    scaler.scale((x @ w).sum()).backward()
    assert scaler.step(opt) and scaler.get_scale() == 1024.0
    scaler.update()
