"""Layer and head numbers count from 1 wherever a user sees them (docs/api/index.md, "Layer and head
numbers count from 1"): for a tiny BERT (2 layers × 4 heads), every number in the self-attention API's
answers, the notebook view's data, ``SelfAttentionMaps`` and the picture ``attnkit explain --plot
--layer`` draws lies in 1..L / 1..H, and a number outside the range is refused with the range."""

import pytest
import torch

from attnkit.cli import main
from attnkit.explorer.notebook import self_attention_view
from attnkit.explorer.self_attention import self_attention_answer
from attnkit.hf import load_self_attention
from hf_tiny import saved_tiny

TEXT = "Jesús lloró."


@pytest.fixture(scope="module")
def bert():
    return load_self_attention(str(saved_tiny("bert")))


def test_self_attention_answers_and_views_number_layers_from_one(bert):
    L, H = bert.num_layers, bert.num_heads
    assert (L, H) == (2, 4)
    every = self_attention_answer(bert, TEXT, all_layers=True)
    assert [x.layer for x in every.layers] == [1, 2] and all(len(x.heads) == H for x in every.layers)
    for layer in (1, 2):
        one = self_attention_answer(bert, TEXT, layer=layer)
        assert [x.layer for x in one.layers] == [layer]
        torch.testing.assert_close(torch.tensor(one.layers[0].heads), torch.tensor(every.layers[layer - 1].heads))
    for bad in (0, 3, -1):
        with pytest.raises(ValueError, match=rf"layer must be in 1\.\.2 \(this model has 2 layers\), got {bad}"):
            self_attention_answer(bert, TEXT, layer=bad)

    maps = bert.self_attention(TEXT)
    assert maps.layers == [1, 2] and maps.heads == [1, 2, 3, 4]
    (view,) = self_attention_view(maps).data["self_attention"]
    assert [x["layer"] for x in view["layers"]] == [1, 2] and view["rollout"] is not None
    part = bert.self_attention(TEXT, layers=[2], heads=[4])
    (view,) = self_attention_view(part).data["self_attention"]
    assert [x["layer"] for x in view["layers"]] == [2] and view["rollout"] is None  # not layers 1..L: no rollout
    torch.testing.assert_close(torch.tensor(view["layers"][0]["heads"]), maps.attention[1, 3:4], atol=1e-4, rtol=0)


def test_explain_numbers_its_picture_and_json_from_one(bert, tmp_path, monkeypatch, capsys):
    import json

    import attnkit.viz.heads as heads_mod

    seen = {}
    write = heads_mod.save_png

    def keep(fig, path, dpi):
        seen["titles"] = [ax.get_title() for ax in fig.axes if ax.get_title()]
        seen["rows"] = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
        return write(fig, path, dpi)

    monkeypatch.setattr(heads_mod, "save_png", keep)
    folder = str(saved_tiny("bert"))
    assert main(["explain", TEXT, "--model", folder, "--plot", str(tmp_path / "all.png")]) == 0
    assert seen["rows"] == ["layer 1", "layer 2"] and seen["titles"] == ["head 1", "head 2", "head 3", "head 4"]
    capsys.readouterr()
    assert main(["explain", TEXT, "--model", folder, "--layer", "2", "--head", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["layer"], out["head"]) == (2, 4)
    assert main(["explain", TEXT, "--model", folder, "--layer", "2", "--plot", str(tmp_path / "one.png")]) == 0
    assert seen["rows"] == ["layer 2"]  # the asked layer keeps its own number, not the grid's first row
    assert main(["explain", TEXT, "--model", folder, "--layer", "3"]) == 2
    assert "--layer must be in 1..2" in capsys.readouterr().err
