"""Head roles (:mod:`attnkit.attribution.head_roles`): each role against a plain loop over hand-made and random
float64 maps; exact maps score 1; the shipped ``attention-only-2l-en`` names its known induction head and a
layer-1 previous-token head; the shipped translator's guided head is marked; ``attnkit heads --roles --json``
equals the library, for attnkit's language model and a Hugging Face decoder-only folder."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnkit.attribution.head_roles import (
    HEAD_ROLES,
    STRONG,
    HeadRoleScores,
    duplicate_token_from_attention,
    language_model_roles,
    map_roles,
    translator_roles,
)
from attnkit.cli import main


def _random_maps(lead, nq, nk, causal, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(*lead, nq, nk, generator=g, dtype=torch.float64) * 3
    if causal:
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool).triu(1), -math.inf)
    return s.softmax(-1)


def _loop_roles(w, causal, rarity, special, positional=True):
    """Every role of one head's map ``w (Nq, Nk)``, query by query in plain Python: ``{role: [value or None]}``."""
    nq, nk = w.shape
    out = {r: [] for r in ("previous", "self", "next", "first", "end", "rare")}
    for i in range(nq):
        keys = list(range(i + 1)) if causal else list(range(nk))
        top = max(keys, key=lambda j: (float(w[i, j]), -j))  # the first of equal maxima, as argmax
        for name, off in (("previous", -1), ("self", 0), ("next", 1)):
            ok = positional and not (causal and off > 0) and 0 <= i + off < nk and len(keys) >= 2
            out[name].append(float(top == i + off) if ok else None)
        out["first"].append(None if causal and len(keys) < 2 else float(w[i, 0]))
        out["end"].append(None if causal else float(w[i, nk - 1]))
        cands = [j for j in keys if not special[j]]
        if len(keys) < 2 or not cands:
            out["rare"].append(None)
        else:
            rarest = max(float(rarity[j]) for j in cands)
            out["rare"].append(float(not special[top] and float(rarity[top]) == rarest))
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_map_roles_equal_a_plain_loop_on_random_maps(causal):
    n = 7
    w = _random_maps((2, 3), n, n, causal)  # (L, H, N, N)
    rarity = torch.tensor([0.0, 5.0, 1.0, 5.0, 2.0, 9.0, 3.0], dtype=torch.float64)  # ties at 5
    special = torch.tensor([True, False, False, False, False, True, False])  # 9 is special: never the rarest
    got = map_roles(w, causal=causal, key_rarity=rarity, key_special=special)
    assert set(got) == {"previous", "self", "first", "rare"} | (set() if causal else {"next", "end"})
    for li in range(2):
        for hi in range(3):
            want = _loop_roles(w[li, hi], causal, rarity, special)
            for role, values in got.items():
                for i, v in enumerate(values[li, hi].tolist()):
                    if want[role][i] is None:
                        assert math.isnan(v), (role, i)
                    else:
                        assert v == pytest.approx(want[role][i], abs=1e-12), (role, li, hi, i)
    hits = sum(v for v in got["rare"].flatten().tolist() if not math.isnan(v))
    assert 0 < hits < got["rare"].numel()  # the random maps hit the rarest token sometimes: a real test


def test_cross_attention_has_no_positional_roles():
    w = _random_maps((1, 2), 4, 6, False)
    got = map_roles(w, causal=False, positional=False)
    assert set(got) == {"first", "end"}
    torch.testing.assert_close(got["end"], w[..., -1])


def test_exact_maps_score_one():
    n = 6
    prev = torch.zeros(n, n, dtype=torch.float64)
    prev[0, 0] = 1
    prev[torch.arange(1, n), torch.arange(n - 1)] = 1  # each query on its previous token
    got = map_roles(prev, causal=True)
    assert float(got["previous"].nanmean()) == 1.0 and float(got["self"].nanmean()) == 0.0
    nxt = torch.zeros(n, n, dtype=torch.float64)
    nxt[torch.arange(n - 1), torch.arange(1, n)] = 1
    nxt[n - 1, n - 1] = 1
    got = map_roles(nxt, causal=False)
    assert float(got["next"].nanmean()) == 1.0 and float(got["previous"].nanmean()) == 0.0
    sink = torch.zeros(n, n, dtype=torch.float64)
    sink[:, 0] = 1
    got = map_roles(sink, causal=True)
    assert float(got["first"].nanmean()) == 1.0
    end = torch.zeros(n, n, dtype=torch.float64)
    end[:, -1] = 1
    assert float(map_roles(end, causal=False)["end"].mean()) == 1.0
    rarity = torch.tensor([0, 1, 7, 2, 3, 4], dtype=torch.float64)  # key 2 is the rarest
    rare = torch.zeros(n, n, dtype=torch.float64)
    rare[:, 2] = 1
    assert float(map_roles(rare, causal=False, key_rarity=rarity)["rare"].mean()) == 1.0


def test_duplicate_and_induction_scores_equal_a_loop():
    length = 5
    w = _random_maps((3, 2), 2 * length, 2 * length, True, seed=3)  # (B, H, 2L, 2L)
    got = duplicate_token_from_attention([w], length)[0]
    for h in range(2):
        want = sum(float(w[b, h, length + j, j]) for b in range(3) for j in range(length)) / (3 * length)
        assert got[h] == pytest.approx(want, abs=1e-12)
    exact = torch.zeros(1, 1, 2 * length, 2 * length, dtype=torch.float64)
    exact[0, 0, :length, 0] = 1
    exact[0, 0, torch.arange(length, 2 * length), torch.arange(length)] = 1
    assert duplicate_token_from_attention([exact], length) == [[1.0]]
    with pytest.raises(ValueError, match="length"):
        duplicate_token_from_attention([exact], 3)


def test_strongest_role_is_the_highest_at_or_above_the_threshold():
    h = HeadRoleScores("lm", 1, 1, {"previous": 0.6, "self": 0.3, "first": 0.7, "induction": None})
    assert h.strongest() == "first" and h.strongest(0.8) is None and h.strongest(0.65) == "first"
    assert HeadRoleScores("lm", 1, 1, {"previous": 0.2}).strongest() is None
    assert STRONG == 0.5


@pytest.fixture(scope="module")
def verses():
    from attnkit.data.corpus import open_corpus

    try:
        return open_corpus("bible").pairs("test", limit=3)
    except Exception as exc:  # the sword Bibles are not installed
        pytest.skip(f"no Bible verses here: {exc}")


def test_shipped_attention_only_model_names_its_induction_and_previous_token_heads(verses):
    """``attention-only-2l-en``: the induction head the ``attnkit models`` line names (from the shipped
    index) is the top induction head here too, and the top previous-token head is in layer 1."""
    from attnkit.pretrained import shipped_models
    from attnkit.service import open_model

    (info,) = [m for m in shipped_models() if m.name == "attention-only-2l-en"]
    known = info.scores["induction_head"]  # "L2.H2", what `attnkit models` says
    report = language_model_roles(
        open_model("attention-only-2l-en").impl, [p.tgt for p in verses]
    )  # the 8 rows `evaluate induction` reads
    top = report.top("induction")
    assert f"L{top.layer}.H{top.head}" == known
    assert (report.top("previous").layer, report.top("previous").head) == (1, 1)
    assert set(report.roles) == {"previous", "self", "first", "rare", "induction", "duplicate"}
    for h in report.heads:
        assert all(v is None or 0.0 <= v <= 1.0 for v in h.scores.values())


def test_shipped_translator_marks_its_guided_head(verses):
    from attnkit.service import open_model
    from attnkit.tasks.translation.guided import guided_head

    model = open_model("transformer-es-en")
    report = translator_roles(model, [p.src for p in verses], [p.tgt for p in verses])
    layer, head, _ = guided_head(model.impl.model.config)
    assert [(h.site, h.layer, h.head) for h in report.heads if h.guided] == [("cross", layer, head)]
    assert {h.site for h in report.heads} == {"encoder", "self", "cross"} and len(report.heads) == 36
    cross = report.get("cross", 1, 1).scores
    assert cross["previous"] is None and cross["end"] is not None
    assert report.get("self", 1, 1).scores["next"] is None  # causal: no +1 key
    assert max(h.scores["previous"] for h in report.heads if h.site == "encoder") > 0.5  # a positional head


def _cli_json(capsys, *argv) -> dict:
    assert main(["heads", "--roles", "--device", "cpu", "--json", *argv]) in (0, None)
    return json.loads(capsys.readouterr().out)


def test_cli_json_equals_the_library(verses, capsys):
    from attnkit.service import open_model

    got = _cli_json(capsys, "--model", "attention-only-2l-en", "--limit", "3", "--threshold", "0.9")
    want = language_model_roles(open_model("attention-only-2l-en").impl, [p.tgt for p in verses], threshold=0.9)
    assert got == {"model": "attention-only-2l-en", "split": "test", **want.to_dict()}
    assert got["threshold"] == 0.9 and got["heads"][0]["strongest"] is None  # its previous-token share is about 0.5
    # without --roles a language model gets its roles table too
    assert main(["heads", "--model", "attention-only-2l-en", "--limit", "1"]) in (0, None)
    table = capsys.readouterr().out
    assert "head roles of attention-only-2l-en" in table and "induction" in table and "*" in table


def test_cli_reads_a_hugging_face_decoder_folder(verses, capsys):
    pytest.importorskip("transformers")
    from attnkit.hf.self_attention import load_self_attention
    from hf_tiny import saved_tiny

    folder = saved_tiny("llama")
    got = _cli_json(capsys, "--model", str(folder), "--limit", "2")
    want = language_model_roles(load_self_attention(str(folder)), [p.tgt for p in verses[:2]])
    assert set(got["roles"]) >= {"previous", "induction", "duplicate"} and len(got["heads"]) == len(want.heads)
    for g, w in zip(got["heads"], want.heads):
        for role in want.roles:
            assert g[role] == pytest.approx(w.scores[role], abs=1e-6)
    assert "token id" in got["notes"]["rare"]


def test_roles_refuse_bad_input():
    with pytest.raises(ValueError, match="texts"):
        language_model_roles(object(), [])
    with pytest.raises(ValueError, match="causal map"):
        map_roles(torch.ones(2, 3), causal=True)
    assert "rare" in HEAD_ROLES
