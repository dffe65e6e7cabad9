"""The package's shape: no import circle between modules, few modules at the root, no CPU names or
measured ratios in the library's text (those live in docs/performance.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ASR = Path(__file__).resolve().parents[1] / "asr"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ASR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The asr modules ``path`` imports anywhere (top level or inside functions), as module names."""
    this = _module(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in modules:  # `from asr.x import y`: y may be a name, not a module
                name = name.rpartition(".")[0]
            if name and name != this and name != "asr":
                out.add(name)
    return out


def test_no_import_circle_between_modules():
    files = sorted(ASR.rglob("*.py"))
    modules = {_module(f) for f in files}
    graph = {_module(f): _imports(f, modules) for f in files}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if n.startswith(m + "."):  # a package importing its own submodules is its table of contents
                continue
            if state.get(n) == 1 and not m.startswith(n + "."):
                circle = stack[stack.index(n):] + [n]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_at_most_twelve_modules_at_the_root():
    root = sorted(p.name for p in ASR.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(root) <= 12, root


def test_library_text_names_no_cpu_and_no_measured_ratio():
    pattern = re.compile(r"EPYC|Xeon|AMD|Intel|[0-9]\.[0-9]+x")
    # The one exception is data, not prose: the CPUID vendor id that MKL's kernel dispatch keys on.
    allowed = 'MKL_VENDOR_ID = "GenuineIntel"'
    hits = [f"{p.relative_to(ASR.parent)}:{i}: {line.strip()}" for p in sorted(ASR.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line) and allowed not in line]
    assert not hits, "\n".join(hits)
