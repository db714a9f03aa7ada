"""hosts/engine/run.py `format_table`: the decision metric (sampled) leads, greedy beside it."""

from dataflex_rl.hosts.engine.run import format_table


def summary(name, greedy, sampled, start=0.5):
    domains = ("math", "logic")
    final = {f"eval/{d}/greedy": g for d, g in zip(domains, greedy)}
    final["eval/mean/greedy"] = sum(greedy) / 2
    if sampled is not None:
        final |= {f"eval/{d}/sampled": s for d, s in zip(domains, sampled)}
        final["eval/mean/sampled"] = sum(sampled) / 2
    initial = {k: start for k in final}
    return {"strategy": name, "final_eval": final, "initial_eval": initial, "wall_seconds": 3}


def test_sampled_columns_come_first_and_are_labelled():
    table = format_table([summary("baseline", (0.8, 0.3), (0.36, 0.11))])
    head, names, _, row = table.splitlines()
    assert head.split() == ["sampled", "accuracy", "(decision", "metric)", "greedy", "accuracy"]
    assert names.split() == ["strategy", *["logic", "math", "mean", "Δ", "mean"] * 2, "time"]
    # sampled: logic 0.11, math 0.36, mean 0.235, Δ from 0.5: -0.265; then greedy
    cells = row.split()
    assert cells == ["baseline", "0.110", "0.360", "0.235", "-0.265"] + [
        "0.300",
        "0.800",
        "0.550",
        "+0.050",
        "3s",
    ]
    # the greedy label starts over greedy's first column (the second "logic")
    assert head.index("greedy") == names.index("logic", names.index("Δ mean"))


def test_greedy_alone_without_sampled_accuracy():
    table = format_table([summary("baseline", (0.8, 0.3), None)])
    head, names = table.splitlines()[:2]
    assert head.split() == ["greedy", "accuracy"] and "decision" not in table
    assert names.split() == ["strategy", "logic", "math", "mean", "Δ", "mean", "time"]
