"""Comparing two answers of the explorer's API."""


def assert_same_answer(a, b, path="answer"):
    """Equal answers: the same keys, texts, pieces, links and integers; numbers equal to their rounding (an
    answer rounds to 4 or 5 decimals, and a batched pass may differ from a lone one by ~1e-6 before rounding)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), path
        for k in a:
            assert_same_answer(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_answer(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert isinstance(b, (int, float)) and abs(a - b) <= 1.01e-4, (path, a, b)
    else:
        assert a == b, (path, a, b)
