"""retrysim's start-up gate for the warm spare of a Python server that does not import the
helper. The harness writes it as `sitecustomize.py` into a directory of its own, put first on
PYTHONPATH, only for a server whose scenario keeps a spare (`spare = true`).

In the process the harness started (or the one it became by `exec`), run as
`python script.py` with RETRYSIM_SPARE set, it imports the packages the script imports at
its top level (installed ones, not the script's own files beside it), then waits at the
helper's gate: each start the check needs is forked from here, and goes on to run the script
with those imports done. Any other process is left alone: a subprocess, `python -c` or
`python -m`, and a script that imports the helper itself (that import is its gate, later and
so with more done ahead). The `sitecustomize` this file hides, if any, runs first.
"""

import ast
import os
import sys

_HELPERS = ("retrysim_points", "retrysim_points_asyncio")


def _run_hidden():
    """Runs the `sitecustomize` later on the path, which this one hides."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _script():
    """The script the spare runs, when this process is the spare and runs one."""
    if not os.environ.get("RETRYSIM_SPARE") or "RETRYSIM_POINTS" not in os.environ:
        return None
    if os.getpid() != os.getpgid(0):
        return None
    script = sys.argv[0] if sys.argv else ""
    if not script.endswith(".py") or not os.path.isfile(script):
        return None
    return os.path.abspath(script)


def _imports(script):
    """The modules the script imports at its top level (and in its top-level `if` and `try`
    blocks), or None when it, or a file of its own it imports (beside it), imports the
    helper, or when it cannot be parsed (it meets that error itself, as it would anyway)."""
    tree = _parsed(script)
    if tree is None:
        return None
    seen, pending = set(), [script]
    while pending and len(seen) < 500:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = _parsed(path)
        for node in ast.walk(tree) if tree is not None else []:
            named, files = _imported(node, path, os.path.dirname(script))
            if any(name.split(".")[0] in _HELPERS for name in named):
                return None
            pending += files
    names, statements = [], list(tree.body)
    while statements:
        statement = statements.pop(0)
        if isinstance(statement, ast.Import):
            names += [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0:
            names.append(statement.module)
        elif isinstance(statement, (ast.If, ast.Try)):
            statements[:0] = statement.body
    return names


def _parsed(path):
    """The syntax tree of the file at `path`, or None where it cannot be read or parsed."""
    try:
        with open(path, "rb") as source:
            return ast.parse(source.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None


def _imported(node, path, beside):
    """The modules `node` (in the file at `path`) imports, if it is an import, and the files
    of the script's own (under `beside`) they may be."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
        roots = [(beside, name.split(".")) for name in named]
    elif isinstance(node, ast.ImportFrom):
        module = (node.module or "").split(".") if node.module else []
        named = [node.module or ""]
        base = beside
        if node.level > 0:
            base = os.path.dirname(path)
            for _ in range(node.level - 1):
                base = os.path.dirname(base)
        roots = [(base, module + [alias.name]) for alias in node.names]
    else:
        return [], []
    files = []
    for base, parts in roots:
        for depth in range(1, len(parts) + 1):
            place = os.path.join(base, *parts[:depth])
            files += [
                candidate
                for candidate in (place + ".py", os.path.join(place, "__init__.py"))
                if os.path.isfile(candidate)
            ]
    return named, files


def _import_ahead(script, names):
    """Imports `names`, but those the script's own directory holds, and those that fail (the
    script meets the failure itself)."""
    import importlib

    beside = os.path.dirname(script)
    for name in names:
        root = name.split(".")[0]
        if os.path.exists(os.path.join(beside, root + ".py")) or os.path.isdir(
            os.path.join(beside, root)
        ):
            continue
        try:
            importlib.import_module(name)
        except Exception:
            pass


def _gate():
    script = _script()
    if script is None:
        return
    names = _imports(script)
    if names is None:
        return
    _import_ahead(script, names)
    # The helper's gate: returns in each forked process only, with RETRYSIM_SPARE unset.
    import _retrysim_spare_gate  # noqa: F401


_run_hidden()
_gate()
