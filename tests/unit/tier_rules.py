"""The tiers of docs/architecture.md as data, and the checker that holds the code against them.

Every import of a velamq module counts: at the top of a file, inside a function, and under
`if TYPE_CHECKING:` (a type-only import ties the files together as much as any other). The checker
is pure (a map of module -> imported modules in, violations out), so its unit tests can feed it a
deliberately broken import; `read_imports` builds that map from the source tree with `ast`.

Three kinds of rule:
- PACKAGE_TIERS: which top-level packages a package may import at all.
- ROOM_LAYERS: inside broker, client and storage, the rooms (subpackages) and root modules in
  layers, highest first. A unit may import units of lower layers only: neither a higher layer nor
  a sibling in its own layer (siblings are independent).
- PROTOCOL_STDLIB_FORBIDDEN: the wire codec is sans-IO (no asyncio, sockets, files).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

TIER0 = frozenset({"velamq", "_errors", "_limits", "_clock", "_topic_name", "_hashing", "_log_limit", "_bundles"})

# package -> the packages (besides its own and tier 0) it may import
PACKAGE_TIERS: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    "storage": frozenset(),  # knows nothing of the network or the protocol
    "metadata": frozenset(),
    "security": frozenset(),
    "broker": frozenset({"protocol", "storage", "metadata", "security"}),  # never admin, client
    "client": frozenset({"protocol"}),  # never broker, storage, metadata, security
    "admin": frozenset({"protocol", "storage", "metadata", "security", "broker"}),
    "spark": frozenset({"client"}),
    "server": frozenset({"protocol", "storage", "metadata", "security", "broker", "admin", "replication"}),
    "testing": frozenset({"server", "broker"}),
    # several broker processes: the composition root run as workers under a supervisor
    "workers": frozenset({"protocol", "storage", "metadata", "security", "broker", "admin", "replication", "server"}),
    # geo-replication: the broker's topics read by velamq's own client toward the remote cluster
    "replication": frozenset({"protocol", "storage", "metadata", "security", "broker", "client"}),
    "cli": frozenset(
        {"protocol", "storage", "metadata", "security", "broker", "client", "admin", "server", "replication", "workers"}
    ),
    "__main__": frozenset({"cli"}),
}
# Tier 0 itself imports tier 0 only.
for _name in TIER0:
    PACKAGE_TIERS.setdefault(_name, frozenset())

# Packages whose public API only may be imported from outside them (no private module of theirs).
PUBLIC_ONLY: dict[str, frozenset[str]] = {"spark": frozenset({"client"})}

ROOM_LAYERS: dict[str, list[set[str]]] = {
    "broker": [
        {"_broker_admin"},
        {"_offload_admin"},
        {"_service"},
        {"nonpersistent"},
        {"session", "service", "stats"},
        {"topic"},
        {"subscription"},
        {"delayed", "log", "guards"},
        {"_channel", "_rates", "_config", "_ownership"},
        {"_errors"},
    ],
    "client": [
        {"blocking"},
        {"_client", "ordered"},
        {"consumer"},
        {"producer"},
        {"transport", "_message_batch"},
        {"_admin_client", "_config", "_arrow"},
        {"schema", "security"},
        {"_message"},
        {"_errors", "_gather"},
    ],
    "storage": [
        {"checker"},
        {"_sharded"},
        {"_sharded_metrics", "_ledger_store"},
        {"_storage", "_check"},
        {"_storage_metrics"},
        {"startup", "offload"},
        {"ledger", "gc"},
        {"write"},
        {"journal", "index"},
        {"formats", "_shard_layout"},
        {"_caches", "_config", "_layout", "_range_set", "_write_errors"},
        {"_position"},
    ],
}

PROTOCOL_STDLIB_FORBIDDEN = frozenset(
    {"asyncio", "socket", "ssl", "selectors", "os", "io", "pathlib", "shutil", "tempfile", "mmap", "subprocess"}
)

ImportMap = Mapping[str, Iterable[str]]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_imports(package_dir: Path) -> dict[str, set[str]]:
    """Every module of the package -> every module it imports (absolute names, as written, plus
    `package.name` for `from package import name` where that names a module)."""
    files = {module_name(package_dir, p): p for p in package_dir.rglob("*.py")}
    result: dict[str, set[str]] = {}
    for module, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in files)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                found.add("builtins.open")
        result[module] = found
    return result


def _package(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "velamq":
        return None
    return parts[1] if len(parts) > 1 else "velamq"


def _unit(module: str, package: str) -> str | None:
    """The room or root module of `package` that `module` belongs to (None for the package's
    __init__, which only re-exports)."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] != package:
        return None
    return parts[2]


def _layer_of(layers: list[set[str]], unit: str) -> int | None:
    for index, layer in enumerate(layers):
        if unit in layer:
            return index
    return None


def violations(imports: ImportMap) -> list[str]:
    """Every import that breaks a rule, one line each ('a imports b: why')."""
    found: list[str] = []
    for module, imported in sorted(imports.items()):
        package = _package(module)
        if package is None:
            continue
        for target in sorted(set(imported)):
            why = _why(module, package, target)
            if why is not None:
                found.append(f"{module} imports {target}: {why}")
    return found


def _why(module: str, package: str, target: str) -> str | None:
    if package == "protocol" and (target.split(".")[0] in PROTOCOL_STDLIB_FORBIDDEN or target == "builtins.open"):
        return "the protocol codec is sans-IO (no asyncio, sockets or files)"
    other = _package(target)
    if other is None or other == package:
        return _why_inside(module, package, target) if other == package else None
    if other in TIER0:
        return None
    allowed = PACKAGE_TIERS.get(package)
    if allowed is None:
        return f"velamq.{package} has no tier in PACKAGE_TIERS"
    if other not in allowed:
        return f"velamq.{package} may not import velamq.{other}"
    public = PUBLIC_ONLY.get(package, frozenset())
    if other in public and any(part.startswith("_") for part in target.split(".")[2:]):
        return f"velamq.{package} may use velamq.{other}'s public API only"
    return None


def _why_inside(module: str, package: str, target: str) -> str | None:
    layers = ROOM_LAYERS.get(package)
    if layers is None:
        return None
    source, dest = _unit(module, package), _unit(target, package)
    if source is None or dest is None or source == dest:
        return None
    source_layer, dest_layer = _layer_of(layers, source), _layer_of(layers, dest)
    if source_layer is None or dest_layer is None:
        unknown = source if source_layer is None else dest
        return f"{package}/{unknown} is in no layer of ROOM_LAYERS"
    if dest_layer < source_layer:
        return f"{package}/{source} is below {package}/{dest}"
    if dest_layer == source_layer:
        return f"{package}/{source} and {package}/{dest} are independent siblings"
    return None


def file_circles(imports: ImportMap) -> list[list[str]]:
    """Circles of modules that import each other inside one package (type-only imports count):
    the strongly connected components of more than one module, each sorted (Tarjan's algorithm)."""
    graph = {m: sorted({t for t in targets if t in imports and t != m}) for m, targets in imports.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)
