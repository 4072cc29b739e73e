"""`bench/bench_time_to_answer.py` reads the margins the quick answer states (`core.racing.Margin.text`)
in both forms, so a pick that differs from the exact run's is judged against what was said."""

from bench.bench_time_to_answer import agree
from core.racing import Figures, margins


def fig(label: str, cost: float, low: float, high: float) -> Figures:
    return Figures(label, label, label, p99=10.0, p99_low=9.5, p99_high=10.5, cost=cost, cost_low=low, cost_high=high)


def run(picks: dict, margin_lines: dict, rows: dict) -> dict:
    return {"picks": picks, "margins": margin_lines, "rows": rows}


def test_a_pick_within_a_lopsided_range_is_within_its_margin_and_beyond_it_differs():
    best, throttled = fig("a", 1.00, 0.95, 1.05), fig("b", 1.01, 0.93, 3.13)
    stated = margins([best, throttled], {"cheapest": "a"})
    assert "(95 %: 8 % less to 213 % more)" in stated["cheapest"]
    picks = {"fastest": None, "balanced": None}
    quick = run({**picks, "cheapest": "a"}, stated, {})

    def exact(cost_a: float) -> dict:
        rows = {"a": {"cost": {"per_million_inferences_usd": cost_a}}, "b": {"cost": {"per_million_inferences_usd": 1}}}
        return run({**picks, "cheapest": "b"}, {}, rows)

    assert agree(quick, exact(2.5))["cheapest"].startswith("within margin (cost +150 % vs 213 %)")
    assert agree(quick, exact(3.5))["cheapest"].startswith("differs (cost +250 % vs 213 %)")


def test_every_form_of_a_stated_margin_is_read_with_its_farthest_reach():
    from bench.bench_time_to_answer import stated_bounds

    text = (
        "balanced: a; the next, b, has a p99 40 % higher (95 %: 3 % to 137 % higher) and costs 31 % ± 6 % more; "
        "cheapest: a; the next, c, costs 1 % more (95 %: 8 % less to 213 % more)"
    )
    assert stated_bounds(text) == [137.0, 37.0, 213.0]
