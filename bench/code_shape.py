"""The shape of the code: the largest modules and the longest functions of the package, the Spark jobs and
the plugins, so a change that grows a module past one idea shows in review.

    .venv/bin/python bench/code_shape.py [--top 15]

Prints two tables: modules by lines (with their function and class counts and the imports made inside
functions), and functions by lines (decorators excluded, nested functions counted on their own).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("include/brokerbench", "spark_jobs", "plugins", "dags")


def sources() -> list[Path]:
    return sorted(p for t in TREES for p in (ROOT / t).rglob("*.py") if "_data" not in p.parts)


def shape(path: Path) -> tuple[dict, list[tuple[int, str]]]:
    text = path.read_text()
    tree = ast.parse(text)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    inner_imports = sum(isinstance(c, (ast.Import, ast.ImportFrom)) for f in functions for c in ast.walk(f))
    rel = path.relative_to(ROOT).as_posix()
    module = {"module": rel, "lines": len(text.splitlines()), "functions": len(functions),
              "classes": len(classes), "imports_in_functions": inner_imports}
    owners = {id(c): n.name for n in classes for c in n.body}
    longest = [((f.end_lineno or f.lineno) - f.lineno + 1,
                f"{rel}:{owners[id(f)] + '.' if id(f) in owners else ''}{f.name}") for f in functions]
    return module, longest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    modules, functions = [], []
    for p in sources():
        m, f = shape(p)
        modules.append(m)
        functions += f
    modules.sort(key=lambda m: -m["lines"])
    print(f"{'module':58} {'lines':>6} {'functions':>9} {'classes':>7} {'imports in functions':>20}")
    for m in modules[: args.top]:
        print(f"{m['module']:58} {m['lines']:>6} {m['functions']:>9} {m['classes']:>7} {m['imports_in_functions']:>20}")
    print(f"\n{'function':80} {'lines':>6}")
    for n, name in sorted(functions, reverse=True)[: args.top]:
        print(f"{name:80} {n:>6}")
    print(f"\n{len(modules)} modules, {sum(m['lines'] for m in modules)} lines, "
          f"{sum(m['imports_in_functions'] for m in modules)} imports inside functions")


if __name__ == "__main__":
    main()
