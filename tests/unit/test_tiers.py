"""The tiers of docs/architecture.md hold in the code (tier_rules.py has the rules and the checker).

The first test reads the real tree; the others feed the checker imports that break each kind of
rule, so a checker that let everything through would fail here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import velamq

sys.path.insert(0, str(Path(__file__).parent))

from tier_rules import ROOM_LAYERS, file_circles, read_imports, violations

PACKAGE_DIR = Path(velamq.__file__).parent


def test_the_code_keeps_every_tier() -> None:
    assert violations(read_imports(PACKAGE_DIR)) == []


def test_no_circle_of_files_inside_the_package() -> None:
    # Package __init__ modules only re-export: an import of the package is not a tie to its parts.
    imports = {m: {t for t in targets if not _is_package(t)} for m, targets in read_imports(PACKAGE_DIR).items()
               if not _is_package(m)}
    assert file_circles(imports) == []


def _is_package(module: str) -> bool:
    return (PACKAGE_DIR.parent / module.replace(".", "/") / "__init__.py").exists()


def test_a_circle_is_found_whatever_its_length() -> None:
    imports = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"], "e": ["e"], "f": ["g"], "g": ["f"]}
    assert file_circles(imports) == [["a", "b", "c"], ["f", "g"]]


def test_every_room_and_root_module_is_in_a_layer() -> None:
    for package, layers in ROOM_LAYERS.items():
        listed = set().union(*layers)
        present = {p.stem if p.is_file() else p.name for p in (PACKAGE_DIR / package).iterdir()
                   if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
        assert present == listed, f"velamq/{package}: rooms not in ROOM_LAYERS or gone from the tree"


def test_type_only_and_function_level_imports_count(tmp_path: Path) -> None:
    package = tmp_path / "velamq"
    (package / "storage").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "storage" / "__init__.py").write_text("")
    (package / "storage" / "_x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from velamq.broker._service import BrokerService\n"
        "def f():\n    import velamq.client\n"
    )
    found = violations(read_imports(package))
    assert found == [
        "velamq.storage._x imports velamq.broker._service: velamq.storage may not import velamq.broker",
        "velamq.storage._x imports velamq.client: velamq.storage may not import velamq.client",
    ]


@pytest.mark.parametrize(
    ("module", "target", "why"),
    [
        ("velamq.broker.topic._topic", "velamq.admin._server", "velamq.broker may not import velamq.admin"),
        ("velamq.client._client", "velamq.broker._service", "velamq.client may not import velamq.broker"),
        ("velamq.client.consumer._consumer", "velamq.storage", "velamq.client may not import velamq.storage"),
        ("velamq.protocol._frames", "asyncio", "the protocol codec is sans-IO (no asyncio, sockets or files)"),
        ("velamq.protocol._frames", "builtins.open", "the protocol codec is sans-IO (no asyncio, sockets or files)"),
        ("velamq.spark._read", "velamq.client._client", "velamq.spark may use velamq.client's public API only"),
        ("velamq.broker.subscription._dispatch", "velamq.broker.topic._topic",
         "broker/subscription is below broker/topic"),
        ("velamq.broker.session._connection", "velamq.broker.stats._records",
         "broker/session and broker/stats are independent siblings"),
        ("velamq.storage.journal._journal", "velamq.storage.write._health", "storage/journal is below storage/write"),
        ("velamq.client.transport._handler", "velamq.client._client", "client/transport is below client/_client"),
        ("velamq.storage.gc._collector", "velamq.storage.compost._heap",
         "storage/compost is in no layer of ROOM_LAYERS"),
    ],
)
def test_a_broken_rule_is_reported(module: str, target: str, why: str) -> None:
    assert violations({module: [target]}) == [f"{module} imports {target}: {why}"]


def test_imports_that_keep_the_rules_pass() -> None:
    assert violations({
        "velamq.broker.topic._topic": ["velamq.broker.subscription._subscription", "velamq.storage", "velamq._clock"],
        "velamq.spark._read": ["velamq.client", "pyarrow"],
        "velamq.client.producer._producer": ["velamq.client.transport._handler", "velamq.protocol"],
        "velamq.protocol._frames": ["struct", "crc32c", "velamq._errors"],
    }) == []
