"""The contract categories are stated once (the catalogue); every other use derives from it."""

from __future__ import annotations

from typing import get_args

from contracts import report
from contracts.suite import FINAL_PHASE, PROBE_PHASE, RUN_ORDER
from contracts.walker import CATEGORY_OF_RULE
from toolkit import catalogue as cat
from toolkit import rules
from toolkit.mock import FAULT_PROFILES


def test_run_order_holds_every_category_once_then_the_probe_then_the_log_judges() -> None:
    assert sorted(RUN_ORDER) == sorted([*cat.CONTRACT_CATEGORIES, PROBE_PHASE, FINAL_PHASE])
    assert RUN_ORDER[0] == "auth"
    # The root-cause checks that judge the whole log (every 5xx, every token request)
    # come after the probe, whose requests they judge too.
    assert RUN_ORDER[-2:] == (PROBE_PHASE, FINAL_PHASE)


def test_the_report_lists_categories_in_the_catalogue_order() -> None:
    assert report.CATEGORIES == cat.CONTRACT_CATEGORIES


def test_every_fault_profile_names_a_contract_category() -> None:
    named = {p.category for p in FAULT_PROFILES.values()} - {None}
    assert named <= set(cat.CONTRACT_CATEGORIES)


def test_rule_categories_map_to_contract_categories() -> None:
    # "attachment" (a content type outside the spec's list) is judged by the write check
    # write.attachment-type-rejected; no data check reports it on records read today.
    for rule in set(get_args(rules.Category)) - {"attachment"}:
        assert CATEGORY_OF_RULE.get(rule, rule) in cat.CONTRACT_CATEGORIES, rule
