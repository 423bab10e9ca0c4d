"""Settings are read as typed attributes, not dict keys: each environment holds its settings as its model of
brokerbench.environments.settings (LocalSettings, AwsSettings, ExternalSettings) and reads ``settings.x``.

Every ``settings["x"]`` / ``settings.get("x")`` with a string key, on a name or attribute called ``settings`` or
``*_settings`` (also ``(settings or {}).get("x")`` and ``getattr(obj, "x_settings")``), anywhere in the package, is
found by walking the source's syntax tree; each is one of :data:`EXCEPTIONS`, with its reason, or the test fails.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "include" / "brokerbench"

#: (module path under include/brokerbench, the read as ast.unparse writes it) -> why it stays a key read
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("environments/machine/broker.py", "broker_settings.get('journalSyncData')"):
        "a variant's broker-side settings: the broker's own configuration keys (Pulsar's journalSyncData), "
        "written into its configuration file, not an environment's settings",
    ("environments/machine/rabbitmq.py", "broker_settings.get('nodes', 1)"):
        "a variant's broker-side settings: RabbitMQ's node count beside its rabbitmq.conf keys, not an "
        "environment's settings",
    ("inventory.py", "settings.get('broker_versions')"):
        "`brokerbench list`: a suite's environmentSettings as written, before any environment validated them "
        "(what a run of it would deploy; a suite with a bad setting is still listed)",
    ("inventory.py", "settings.get('broker_implementations')"):
        "`brokerbench list`: as above, the stand-ins a suite names",
    ("spec/plan.py", "settings['broker_versions']"):
        "the plan's environment settings in their serialised form (plan.json), side B's versions written over "
        "them; the spec layer may not import the environments' models (tests/unit/test_import_rules.py)",
    ("spec/plan.py", "settings.get('broker_versions')"):
        "as above",
    ("pipeline/benchmark.py", "(getattr(plan, 'environment_settings', {}) or {}).get('worker_processes')"):
        "worker processes per client host, read from plan.json's environment settings by processes_for, which "
        "the command line also calls with a bare plan; to go with the job's typed path through this module",
}


def _target(node: ast.expr) -> str | None:
    """The name a read is made on: ``settings``, ``self.settings``, ``(settings or {})``, ``getattr(p, "x")``."""
    while isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        node = node.values[0]
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
        return node.args[1].value
    return None


def _on_settings(node: ast.expr) -> bool:
    name = _target(node)
    return name is not None and (name == "settings" or name.endswith("_settings"))


def _string(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def key_reads(tree: ast.AST) -> list[ast.expr]:
    """Every ``settings["x"]`` and ``settings.get("x", ...)`` in ``tree`` (string keys only)."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _on_settings(node.value) and _string(node.slice):
            found.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and _on_settings(node.func.value) and node.args and _string(node.args[0]):
            found.append(node)
    return found


def package_key_reads() -> Counter[tuple[str, str]]:
    reads: Counter[tuple[str, str]] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in key_reads(ast.parse(path.read_text(), str(path))):
            reads[(path.relative_to(PACKAGE).as_posix(), ast.unparse(node))] += 1
    return reads


def test_settings_are_read_as_attributes_except_the_listed_reads():
    reads = package_key_reads()
    unlisted = sorted(f"{path}: {read} (x{n})" for (path, read), n in reads.items() if (path, read) not in EXCEPTIONS)
    assert not unlisted, "read the settings model's attribute (environments/settings.py), or list the read in " \
                         "EXCEPTIONS with its reason:\n" + "\n".join(unlisted)
    gone = sorted(f"{path}: {read}" for path, read in EXCEPTIONS if (path, read) not in reads)
    assert not gone, "no longer in the package: remove from EXCEPTIONS:\n" + "\n".join(gone)
    assert sum(reads.values()) == len(EXCEPTIONS), reads  # each listed read once


def test_the_walk_finds_each_form_of_key_read():
    source = '''
settings["a"]
self.settings.get("b")
env.settings.get("c", 1)
aws_settings["d"]
(settings.get("e") or {}).get("f")
(getattr(plan, "environment_settings", {}) or {}).get("g")
settings[key]            # a variable key: not a string key read
settings.a               # an attribute: the typed read
results["h"]             # not settings
'''
    found = [ast.unparse(n) for n in key_reads(ast.parse(source))]
    assert sorted(found) == sorted([
        "settings['a']", "self.settings.get('b')", "env.settings.get('c', 1)", "aws_settings['d']",
        "settings.get('e')", "(getattr(plan, 'environment_settings', {}) or {}).get('g')"])


if __name__ == "__main__":  # python tests/unit/test_settings_reads.py [package dir]: every read, and the count
    import sys

    if len(sys.argv) > 1:
        PACKAGE = Path(sys.argv[1]).resolve()
    found = package_key_reads()
    for (path, read), n in sorted(found.items()):
        print(f"{path}: {read}" + (f" (x{n})" if n > 1 else "") + ("" if (path, read) in EXCEPTIONS else "  UNLISTED"))
    print("total", sum(found.values()))
