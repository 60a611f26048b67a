"""Artifact descriptions say how many rows a capped table shows, truthfully."""

from tasks.aggregation import rater_table_description
from tasks.artifacts import which_rows


def test_a_capped_table_never_claims_more_rows_than_there_are() -> None:
    assert which_rows(100, 24) == "all 24"
    assert which_rows(100, 100) == "all 100"
    assert which_rows(100, 250) == "first 100 of 250"
    assert which_rows(100, 0) == "all 0"


def test_the_rater_table_description_uses_it() -> None:
    import pandas as pd

    assert "(all 3 raters;" in rater_table_description(pd.DataFrame({"rater_key": ["a", "b", "c"]}))
