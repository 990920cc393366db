"""int8 query/key/value projections of :class:`MultiHeadAttention` (its packed ``in_proj_weight`` is a
parameter, which ``quantize_dynamic`` leaves float), against float64 ``x Wᵀ + b``."""

import torch

from attnkit.attention import MultiHeadAttention
from attnkit.device import place


def _bound(x, w):
    # per-row weight scale max|w_row| / 127 and per-call input scale (max x - min x) / 255: each product
    # is off by at most about |x| s_w / 2 + |w| s_x / 2, summed over the inputs (as in test_int8)
    s_w = w.abs().amax(1) / 127
    s_x = (x.max() - x.min()) / 255
    return (x.abs().sum(-1, keepdim=True) * s_w / 2 + w.abs().sum(1) * s_x / 2) * 1.5


def test_packed_and_separate_projections_run_in_int8_within_its_error():
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4).eval()
    with torch.no_grad():
        m.in_proj_bias.normal_()
    x = torch.randn(3, 5, 32)
    w, b = m.in_proj_weight.detach(), m.in_proj_bias.detach()
    ref = (x.double() @ w.double().T + b.double()).float()  # (3, 5, 3E)
    state = {k: v.clone() for k, v in m.state_dict().items()}
    m.quantize_projections_int8()
    with torch.no_grad():
        q, k, v = m._project_qkv(x, x, x)  # (B, H, N, Dh) each
        got = torch.cat([t.transpose(1, 2).reshape(3, 5, 32) for t in (q, k, v)], -1)
        q_only = m.project_query(x).transpose(1, 2).reshape(3, 5, 32)
    err = (got - ref).abs()
    assert err.le(_bound(x, w)).all() and err.max() > 0  # int8 arithmetic, within its error
    assert (q_only - ref[..., :32]).abs().le(_bound(x, w[:32])).all()
    assert state.keys() == m.state_dict().keys()  # the checkpoint's parameters are unchanged
    assert all(torch.equal(state[k], m.state_dict()[k]) for k in state)


def test_place_int8_quantizes_every_attention_projection():
    from attnkit.pretrained import resolve_model
    from attnkit.training.checkpoint import load_model

    model, _, _ = load_model(resolve_model("transformer-es-en"))
    layers = [m for m in place(model, "cpu", "int8").modules() if isinstance(m, MultiHeadAttention)]
    assert len(layers) == 9  # 3 encoder self-attentions, 3 decoder self- and 3 cross-attentions
    assert all(m._int8 is not None and set(m._int8) == {"q", "k", "v", "qkv"} for m in layers)
