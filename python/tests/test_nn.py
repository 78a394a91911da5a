"""Python-defined modules: registration, state dicts, safetensors, devices, and training that
matches the C++ Trainer bit for bit."""
import os

import numpy as np
import pytest
import tessera as ts
from conftest import FASHION_MNIST


class MLP(ts.nn.Module):
    """make_mlp() written in Python: the same layers created in the same order."""

    def __init__(self):
        super().__init__()
        self.flatten = ts.nn.Flatten()
        self.fc1 = ts.nn.Linear(784, 256)
        self.fc2 = ts.nn.Linear(256, 128)
        self.fc3 = ts.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(ts.relu(self.fc2(ts.relu(self.fc1(self.flatten(x))))))


class Scaled(ts.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = ts.nn.Linear(3, 2)
        self.scale = ts.nn.Parameter(ts.ones(2))
        self.register_buffer("calls", ts.zeros(1))
        self.label = "not a tensor"

    def forward(self, x):
        return self.inner(x) * self.scale


def test_registration_and_state_dict(tmp_path):
    m = Scaled()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scale", "inner.weight", "inner.bias"]
    assert [n for n, _ in m.named_buffers()] == ["calls"]
    assert isinstance(m.inner, ts.nn.Linear) and isinstance(m.inner, ts.nn.Module) and m.label == "not a tensor"
    out = m(ts.ones(4, 3))
    assert out.shape == (4, 2)
    out.sum().backward()
    assert m.scale.grad is not None and m.inner.weight.grad.shape == (2, 3)
    state = m.state_dict()
    assert sorted(state) == ["calls", "inner.bias", "inner.weight", "scale"]
    path = tmp_path / "scaled.safetensors"
    ts.save(state, path)
    loaded, _ = ts.nn.load_safetensors(str(path))  # the C++ reader
    other = Scaled()
    other.load_state_dict(loaded)
    for k, v in other.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k].detach().numpy())
    with pytest.raises(ts.Error, match="scale"):
        other.load_state_dict({k: v for k, v in loaded.items() if k != "scale"})
    assert "Scaled" in repr(m) and "Linear(3, 2)" in repr(m)


def test_modules_move_between_devices(device):
    ts.manual_seed(1)
    m = Scaled()
    x = ts.randn(5, 3)
    want = m(x).detach().numpy()
    m.to(device)
    assert all(str(p.device) == str(ts.device(device)) for p in m.parameters())
    got = m(x.to(device)).detach().cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    m.to(ts.float64)
    assert m.scale.dtype == ts.float64


def test_sequential_and_module_list():
    seq = ts.nn.Sequential(ts.nn.Linear(4, 8), ts.nn.ReLU(), ts.nn.Linear(8, 2))
    assert len(seq) == 3 and isinstance(seq[0], ts.nn.Linear)
    assert len(seq.parameters()) == 4
    blocks = ts.nn.ModuleList([Scaled(), Scaled()])
    assert [n for n, _ in blocks.named_parameters()][:2] == ["0.scale", "0.inner.weight"]
    import gc
    inner = ts.nn.Sequential(ts.nn.Linear(4, 3), Scaled())  # the Python layer has no other reference
    gc.collect()
    assert inner(ts.ones(2, 4)).shape == (2, 2)
    seq.append(Scaled())  # a Python module inside a C++ container: its forward is called from C++
    with pytest.raises(ts.Error, match="Linear|matmul|linear"):
        seq(ts.ones(1, 4))  # Scaled expects 3 features, gets 2


@pytest.mark.skipif(not os.path.exists(os.path.join(FASHION_MNIST, "train-images-idx3-ubyte.gz")), reason="dataset-fashion-mnist not installed")
def test_python_loop_matches_trainer_bit_for_bit():
    """2 epochs of Fashion-MNIST: a Python-defined module in a Python loop against make_mlp() in the
    C++ Trainer, same seed, same op sequence: identical parameters and identical test accuracy."""
    train_x, train_y = ts.nn.load_mnist(FASHION_MNIST, "train")
    test_x, test_y = ts.nn.load_mnist(FASHION_MNIST, "test")

    def loaders():
        return (ts.nn.DataLoader(train_x, train_y, batch_size=128, seed=5),
                ts.nn.DataLoader(test_x, test_y, batch_size=1000, shuffle=False))

    ts.manual_seed(11)
    py_model = MLP()
    opt = ts.optim.SGD(py_model.parameters(), lr=0.05, momentum=0.9)
    train, test = loaders()
    for epoch in range(2):
        py_model.train()
        opt.zero_grad()
        for x, y in train.epoch(epoch):
            loss = ts.nn.functional.cross_entropy(py_model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
    py_model.eval()
    correct = total = 0
    with ts.no_grad():
        for x, y in test.epoch(0):
            correct += (py_model(x).argmax(-1) == y).sum().item()
            total += y.shape[0]
    py_accuracy = correct / total

    ts.manual_seed(11)
    cpp_model = ts.nn.make_mlp()
    cpp_opt = ts.optim.SGD(cpp_model.parameters(), lr=0.05, momentum=0.9)
    train, test = loaders()
    history = ts.nn.Trainer(cpp_model, cpp_opt).fit(train, test, epochs=2)
    assert len(history) == 2 and history[1]["test_samples"] == 10000
    assert history[1]["test_accuracy"] == py_accuracy, (history[1]["test_accuracy"], py_accuracy)
    assert py_accuracy > 0.82
    mine = [p.numpy().tobytes() for p in (t.detach() for t in py_model.parameters())]
    theirs = [p.numpy().tobytes() for p in (t.detach() for t in cpp_model.parameters())]
    assert mine == theirs


def test_attention_and_recurrent_modules_against_torch():
    torch = pytest.importorskip("torch")
    ts.manual_seed(3)
    mha = ts.nn.MultiHeadAttention(8, 2)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    sd = {k: torch.from_numpy(v.detach().numpy()) for k, v in mha.state_dict().items()}
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([sd["q_proj.weight"], sd["k_proj.weight"], sd["v_proj.weight"]]))
        ref.in_proj_bias.copy_(torch.cat([sd["q_proj.bias"], sd["k_proj.bias"], sd["v_proj.bias"]]))
        ref.out_proj.weight.copy_(sd["out_proj.weight"])
        ref.out_proj.bias.copy_(sd["out_proj.bias"])
    x = ts.randn(2, 5, 8)
    xt = torch.from_numpy(x.numpy())
    want, _ = ref(xt, xt, xt, need_weights=False)
    np.testing.assert_allclose(mha(x).detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    want_causal, _ = ref(xt, xt, xt, attn_mask=causal, need_weights=False)
    np.testing.assert_allclose(mha(x, causal=True).detach().numpy(), want_causal.detach().numpy(), rtol=1e-4, atol=1e-5)
    lstm = ts.nn.LSTM(4, 6, num_layers=2, batch_first=True)
    y, (h, c) = lstm(ts.randn(3, 7, 4))
    assert y.shape == (3, 7, 6) and h.shape == (2, 3, 6) and c.shape == (2, 3, 6)
    tl = torch.nn.LSTM(4, 6, num_layers=2, batch_first=True)
    with torch.no_grad():
        for name, p in tl.named_parameters():
            p.copy_(torch.from_numpy(lstm.state_dict()[name].numpy()))
    xs = ts.randn(3, 7, 4)
    mine, (mh, mc) = lstm(xs)
    want, (wh, wc) = tl(torch.from_numpy(xs.numpy()))
    np.testing.assert_allclose(mine.detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mc.detach().numpy(), wc.detach().numpy(), rtol=1e-4, atol=1e-5)
    gru = ts.nn.GRU(4, 5)
    out, hn = gru(ts.randn(6, 2, 4))
    assert out.shape == (6, 2, 5) and hn.shape == (1, 2, 5)
