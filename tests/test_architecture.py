"""The package's layering, read from its imports with ``ast``:

* no import cycle among package modules (function-level imports count too);
* the low layers never import the layers above them;
* no package module outside ``testing/`` imports ``tvm_fusion_ext.testing``;
* no private name (``_x``) is imported from another module.
"""

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = "tvm_fusion_ext"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
# Layers that must not import the layers above them.
LOW = ("analysis", "cost", "partitioners", "relax_passes", "tir_passes", "hardware", "target_dsa",
       "backends")
HIGH = ("pipelines", "driver", "tuning", "cli", "explain")


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package ``__init__``)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


MODULES = _modules()


def _imports(module: str) -> list[tuple[str, str | None]]:
    """``(imported package module, imported name or None)`` for every import in ``module``,
    function-level ones included; a name that is itself a module is given as that module."""
    path, is_package = MODULES[module]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in MODULES:
                    found.append((full, None))
                elif target in MODULES:
                    found.append((target, alias.name))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names if alias.name in MODULES)
    return found


def _edges() -> dict[str, set[str]]:
    """Module -> modules it imports; a package's ``__init__`` re-exporting its own children is
    not an edge (that is how a package presents its API, not a dependency)."""
    edges = {}
    for module, (_, is_package) in MODULES.items():
        deps = {dep for dep, _ in _imports(module) if dep != module}
        edges[module] = {d for d in deps if not (is_package and d.startswith(module + "."))}
    return edges


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    edges = _edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return components


def _private_imports() -> dict[str, list[str]]:
    """Importing module -> ``"_name from module"`` for private names imported across modules."""
    found = defaultdict(list)
    for module in MODULES:
        for dep, name in _imports(module):
            if name and name.startswith("_") and not name.startswith("__") and dep != module:
                found[module].append(f"{name} from {dep}")
    return found


def _in(module: str, layers: tuple[str, ...]) -> bool:
    return any(module == f"{PACKAGE}.{layer}" or module.startswith(f"{PACKAGE}.{layer}.") for layer in layers)


def test_the_scan_sees_module_and_function_level_imports():
    assert (f"{PACKAGE}.relax_passes.fuse_ops_dominator", "FuseOpsDominator") in _imports(
        f"{PACKAGE}.pipelines.strategies")
    # backends/dsa.py imports the matrix intrinsic inside DSABackend.schedule_passes
    assert (f"{PACKAGE}.target_dsa.intrinsics", "register_matrix_intrin") in _imports(
        f"{PACKAGE}.backends.dsa")


def test_no_import_cycles_at_all():
    assert _cycles() == []


def test_low_layers_do_not_import_the_layers_above_them():
    upward = [f"{module} imports {dep}" for module in MODULES if _in(module, LOW)
              for dep, _ in _imports(module) if _in(dep, HIGH)]
    assert upward == []


def test_package_code_does_not_import_testing():
    users = [module for module in MODULES if not _in(module, ("testing",))
             and any(_in(dep, ("testing",)) for dep, _ in _imports(module))]
    assert users == []


def test_no_private_names_imported_at_all():
    assert dict(_private_imports()) == {}
