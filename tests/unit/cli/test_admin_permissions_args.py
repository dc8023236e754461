"""The argument parsing of `velamq admin`'s permission verbs (the calls themselves are tested against
a secured broker in tests/integration/test_admin_cli_permissions.py)."""

from __future__ import annotations

import pytest

from velamq.cli._admin_permissions import AUTH_ACTIONS, parse_actions, split_list
from velamq.security import AuthAction


def test_the_cli_knows_the_brokers_actions() -> None:
    # The list is kept in the CLI so `velamq admin` does not load the broker's security libraries.
    assert set(AUTH_ACTIONS) == set(AuthAction.__members__)


@pytest.mark.parametrize(("given", "expected"), [
    (["produce,consume"], ["produce", "consume"]),
    (["produce", "consume"], ["produce", "consume"]),
    ([" produce , consume,", "functions"], ["produce", "consume", "functions"]),
    (["consume,consume"], ["consume"]),
])
def test_actions_as_pulsar_admin_takes_them(given: list[str], expected: list[str]) -> None:
    assert parse_actions(given) == expected


@pytest.mark.parametrize(("given", "message"), [
    (["produce,publish"], "unknown action 'publish'"),
    (["Produce"], "unknown action 'Produce'"),
    ([","], "give at least one action"),
    (None, "give at least one action"),
])
def test_bad_actions_are_refused_before_any_call(given: list[str] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_actions(given)


def test_roles_split_on_commas() -> None:
    assert split_list(["app,billing", "audit"], "role") == ["app", "billing", "audit"]
    with pytest.raises(ValueError, match="give at least one role"):
        split_list([""], "role")
