"""core/texttable.py: grouped headers, alignment, and a label wider than its columns."""

import pytest

from dataflex_rl.core.texttable import text_table


def test_groups_label_their_columns_and_cells_align():
    out = text_table(
        [("", ["method"]), ("sampled", ["math", "mean"]), ("greedy", ["math"])],
        [["baseline", "0.360", "0.283", "0.8"], ["up", "1", "2", "3"]],
    )
    lines = out.splitlines()
    # "greedy" is wider than its column "math": the column widens to 6
    assert lines == [
        "          sampled       greedy",
        "method     math   mean    math",
        "--------  -----  -----  ------",
        "baseline  0.360  0.283     0.8",
        "up            1      2       3",
    ]


def test_a_long_label_widens_its_last_column():
    out = text_table([("", ["m"]), ("a long label", ["x"])], [["a", "1"]])
    head, names, rule, row = out.splitlines()
    assert head == "   a long label" and len(names) == len(head) == len(rule)
    assert row.endswith("1")


def test_a_row_with_the_wrong_number_of_cells_is_refused():
    with pytest.raises(ValueError, match="a row has 1 cells for 2 columns"):
        text_table([("", ["m", "x"])], [["a"]])
