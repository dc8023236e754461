"""Every exception class under velamq derives from velamq.VelamqError (one exception tree, docs/architecture.md).

The test imports every module of the package (private ones included) and checks each exception
class defined there, so a new `class SomethingError(Exception)` anywhere fails here. The tree is
drawn in velamq/_errors.py's docstring.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import velamq
from velamq import VelamqError

# Modules that must not be imported for this check: running them is their only purpose.
_NOT_IMPORTED = {"velamq.__main__"}


def _modules() -> list[str]:
    names = ["velamq"]
    for info in pkgutil.walk_packages(velamq.__path__, "velamq."):
        if info.name not in _NOT_IMPORTED:
            names.append(info.name)
    return names


def _exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for name in _modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ == name and issubclass(value, BaseException):
                found.append(value)
    return found


def test_the_walk_finds_the_package_s_exceptions() -> None:
    names = {f"{cls.__module__}.{cls.__qualname__}" for cls in _exception_classes()}
    # A check that finds nothing would pass for the wrong reason: these exist in three tiers.
    assert {"velamq._errors.VelamqError", "velamq.client._errors.AdminError",
            "velamq.spark._options.VelamqOptionError"} <= names


def test_every_exception_class_derives_from_velamq_error() -> None:
    strays = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in _exception_classes()
                    if not issubclass(cls, VelamqError))
    assert strays == []


def test_no_two_exception_classes_share_a_name() -> None:
    by_name: dict[str, list[str]] = {}
    for cls in _exception_classes():
        by_name.setdefault(cls.__name__, []).append(cls.__module__)
    assert {name: modules for name, modules in by_name.items() if len(modules) > 1} == {}


def test_the_tree_in_errors_docstring_names_every_class() -> None:
    import velamq._errors

    drawn = velamq._errors.__doc__ or ""
    # The client's BrokerError subclasses are one line per code in client/_errors.py, summed up there.
    summed_up = {"velamq.client._errors"}
    missing = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in _exception_classes()
                     if cls.__module__ not in summed_up and cls.__name__ not in drawn)
    assert missing == []
