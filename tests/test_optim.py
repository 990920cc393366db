"""attnkit's Adam: fused where PyTorch can, and the same updates as PyTorch's default Adam."""

import torch

from attnkit.training.optim import adam


def _train(opt_factory, steps=5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    opt = opt_factory(model.parameters())
    x, y = torch.randn(8, 6), torch.randn(8, 3)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return opt, [p.detach().clone() for p in model.parameters()]


def test_fused_on_cpu_and_equal_to_the_default_adam():
    opt, fused = _train(lambda p: adam(p, lr=1e-2, betas=(0.9, 0.98), eps=1e-9))
    assert opt.defaults["fused"] is True
    ref_opt, ref = _train(lambda p: torch.optim.Adam(p, lr=1e-2, betas=(0.9, 0.98), eps=1e-9))
    assert not ref_opt.defaults["fused"]
    for a, b in zip(fused, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_not_fused_where_the_kernel_cannot_run():
    meta = torch.nn.Parameter(torch.zeros(3, device="meta"))
    assert not adam([meta], lr=1e-3).defaults["fused"]


def test_state_dict_loads_into_the_default_adam_and_back():
    opt, _ = _train(lambda p: adam(p, lr=1e-2))
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    plain = torch.optim.Adam(model.parameters(), lr=1e-2)
    plain.load_state_dict(opt.state_dict())  # a checkpoint written with the fused Adam
    assert plain.state_dict()["state"][0]["exp_avg"].shape == (5, 6)
    again = adam(model.parameters(), lr=1e-2)
    again.load_state_dict(plain.state_dict())
    assert float(again.state_dict()["state"][0]["step"]) == 5.0
