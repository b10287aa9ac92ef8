"""Staleness by what compiles and launches: a hash over the code *reachable* from a variant.

A measured record stays current while nothing that decides which kernel is compiled, with which
constexprs, and how it is launched has changed. ``code_hash(*roots)`` walks that code statically,
starting at the roots (launcher functions, ``@triton.jit`` / ``@gluon.jit`` kernels, classes,
``functools.partial`` objects, bound methods, modules, dispatch tables; roots are always hashed):

* every name and every ``module.attr`` / ``Class.attr`` chain the code reads is resolved in the
  function's ``__globals__`` (closure cells first; imports inside a function are looked up in
  ``sys.modules``, nothing is imported), and what it resolves to is

  - **hashed and walked** when it is a JIT function (JITFunction, ConstexprFunction, autotuned or
    interpreted) from anywhere but ``triton.*`` itself (a Liger kernel counts; ``tl.cdiv`` and
    other triton.language helpers come with the triton version a record carries), or a function
    or class defined in a module under ``packages`` (a class with all its methods, so dataclass
    defaults count; its constant class attributes too, monkeypatched ones included);
  - **hashed as a value** when it is a constant: bool/int/float/str/bytes/None, containers of
    them (dict items and sets sorted), ``tl.constexpr`` (by ``.value``), dataclass instances by
    field (gluon layouts such as ``gl.NVMMASharedLayout``; code in a field counts by name only),
    objects of ``packages`` or of triton whose ``repr`` has no memory address. A container may
    hold code (a table of kernels by op): that code is hashed and walked too, as are the
    function and the arguments of a ``functools.partial``;
  - **ignored** otherwise: modules themselves, torch / typing / stdlib objects, functions and
    classes of other packages, builtins, locals, names that do not resolve, and this module.

* source is normalized: the definition's AST is unparsed without docstrings, so comments,
  docstrings and formatting do not count. Decorators do (``@gluon.jit(do_not_specialize=["M"])``
  changes what compiles); the names in a decorator's *arguments* are walked
  (``@triton.autotune(configs=CONFIGS)``), the decorator itself is not (``@register(...)`` must
  not make every variant depend on the registry). Annotations are hashed as text, not walked.

Keys are ``module.qualname``; a constant is keyed by the namespace the code reads it from (e.g.
``gluon_lab_old.kernels.chunked.CACHED_SMEM_LIMIT``; ``from m import X`` keys X under the importing
module), a closure cell under its function (``f.<closure>.k``). The hash therefore does not
depend on file paths, on dict or set order, or on the order of the roots.

Not seen (static analysis): attributes of instances (``self.x``, ``plan.rows`` for an argument
``plan``), lookups by string (``getattr(obj, "name")``, ``globals()[...]``), code passed in at call
time, the code behind a wrapping decorator (``__wrapped__`` is hashed), function-local imports of
modules not yet imported, and code outside ``packages`` other than JIT functions. Nothing is
cached (callers cache; tests monkeypatch constants and expect a fresh hash); the garbage
collector is paused during a walk (~5-20 ms for one variant), since a collection in a process
holding torch costs ~100 ms.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import enum
import functools
import gc
import hashlib
import importlib.util
import inspect
import linecache
import re
import sys
import textwrap
import types
from typing import Any, Iterable

try:  # triton is a dependency of the lab; keep this module importable without it anyway
    from triton.language import constexpr as _constexpr
    from triton.runtime.jit import JITCallable as _JITCallable
    from triton.runtime.jit import KernelInterface as _KernelInterface
except ImportError:  # pragma: no cover
    class _constexpr:  # type: ignore[no-redef]
        pass

    class _JITCallable:  # type: ignore[no-redef]
        pass

    class _KernelInterface:  # type: ignore[no-redef]
        pass

# JIT-like wrappers around a Python function `.fn`: JITFunction (@triton.jit, @gluon.jit),
# ConstexprFunction, InterpretedFunction (TRITON_INTERPRET=1), Autotuner / Heuristics
_JIT_WRAPPERS = (_JITCallable, _KernelInterface)

__all__ = ["code_hash", "code_closure"]

_MISSING = object()
_NEVER = ("builtins", __name__)  # this module is tooling: editing it must not make records stale
# Registries of every op's spec and every variant: looking one entry up is not depending on all of
# them (adding an op must not make every record stale). What a variant uses of them is reached
# through its own objects: its spec instance (closures), its functions and kernels (roots).
_REGISTRIES = frozenset({"gluon_lab_old.specs._base._SPECS", "gluon_lab_old.registry._REGISTRY"})
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_PRIMITIVES = (bool, int, float, complex, str, bytes, type(None))
_JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "noinline")
_SKIP_FIELDS = frozenset({"annotation", "returns", "type_comment"})
_COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef) + _COMPS


def code_hash(*roots: Any, packages: Iterable[str] = ("gluon_lab_old",)) -> str:
    """sha256 (16 hex chars) over ``code_closure(*roots, packages=packages)``."""
    h = hashlib.sha256()
    for key, text in code_closure(*roots, packages=packages).items():
        h.update(key.encode())
        h.update(b"\0")
        h.update(text.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def code_closure(*roots: Any, packages: Iterable[str] = ("gluon_lab_old",)) -> dict[str, str]:
    """Everything ``code_hash`` hashes, sorted by key: qualified name -> normalized source (code)
    or canonical repr (constants). Roots are always included, even from outside ``packages``."""
    w = _Walker((packages, ) if isinstance(packages, str) else tuple(packages))
    enabled = gc.isenabled()
    gc.disable()  # the walk allocates many short-lived objects (ASTs): in a process holding torch the
    try:  # collections that triggers took ~100 ms of ~120 ms for gluon-chunked's closure
        for root in roots:
            w.add_root(root)
        w.run()
    finally:
        if enabled:
            gc.enable()
    return dict(sorted(w.out.items()))


# ----------------------------------------------------------------------------------------------
# AST helpers

_STMT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _substatements(node: ast.AST) -> list[ast.AST]:
    """The statements directly inside a statement (expressions are not entered: cheap)."""
    out: list[ast.AST] = []
    for f in _STMT_FIELDS:
        value = getattr(node, f, None)
        if isinstance(value, list):  # (a Lambda's body is one expression)
            out.extend(c for c in value if isinstance(c, ast.AST))
    return out


def _strip_docstrings(root: ast.AST, done: set[int]) -> None:
    """Drop the docstring of root and of every def/class inside it (each node once)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Module, *_DEFS)) and id(node) not in done:
            done.add(id(node))
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        stack.extend(_substatements(node))


class _FStrings(ast.NodeTransformer):
    """f-strings as plain calls: ``ast.unparse`` prints f-strings differently across Python
    versions (3.12's PEP 701 quoting: f"{d['k']}" vs f'{d['k']}'), and a record measured under
    3.12 must be current under 3.11."""

    def visit_JoinedStr(self, node):
        return ast.Call(ast.Name("__fstring__", ast.Load()), [self.visit(v) for v in node.values], [])

    def visit_FormattedValue(self, node):
        spec = self.visit(node.format_spec) if node.format_spec is not None else ast.Constant(None)
        return ast.Call(ast.Name("__fvalue__", ast.Load()), [self.visit(node.value), ast.Constant(node.conversion), spec],
                        [])


def _unparse(node: ast.AST) -> str:
    """Version-independent normalized text of a (docstring-stripped) definition."""
    return ast.unparse(ast.fix_missing_locations(_FStrings().visit(copy.deepcopy(node))))


def _chain(node: ast.Attribute) -> tuple[str, ...] | None:
    """('a', 'b', 'c') for a.b.c; None when the base is not a plain name (f(x).y)."""
    parts = []
    cur: ast.AST = node
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name):
        return None
    parts.append(cur.id)
    return tuple(reversed(parts))


def _decorator_args(decorators: list[ast.expr]) -> list[ast.expr]:
    """The arguments of decorator calls, not the decorators: ``@register(op, roots=R)`` reaches R,
    not the registry (which would make every variant depend on the registry's code), and
    ``@triton.autotune(configs=CONFIGS)`` reaches CONFIGS. Their text is hashed either way."""
    out: list[ast.expr] = []
    stack = list(decorators)
    while stack:
        d = stack.pop()
        if isinstance(d, ast.Call):
            out.extend(d.args)
            out.extend(k.value for k in d.keywords)
            stack.append(d.func)  # @a(x)(y): the arguments of a(x) too
    return out


def _references(root: ast.AST) -> tuple[set[tuple[str, ...]], set[tuple[str, ...]], list[ast.AST]]:
    """(free chains, local chains, import statements) read by the code under root.

    A chain is a name plus the attributes read from it (``("norm_math", "rms_rstd")``). Free
    chains start at a name no enclosing scope binds, by Python's rules (a class body's names are
    not visible to its methods; ``global x`` unbinds x); local chains start at a bound name
    (needed for imports inside functions). One pass records the loads per scope; they are
    resolved once every scope's bindings are known."""
    # per scope: (names bound, names declared global, is a class body, parent scope index)
    scopes: list[tuple[set[str], set[str], bool, int]] = []
    loads: list[tuple[tuple[str, ...], int]] = []
    imports: list[ast.AST] = []

    def bind(name: str, sc: int) -> None:
        if sc >= 0:
            scopes[sc][0].add(name)

    stack: list[tuple[ast.AST, int]] = [(root, -1)]
    while stack:
        node, sc = stack.pop()
        if isinstance(node, _SCOPES):
            if isinstance(node, _DEFS):
                bind(node.name, sc)
            new = len(scopes)
            scopes.append((set(), set(), isinstance(node, ast.ClassDef), sc))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                scopes[new][0].update(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                                      if x is not None)
                outer = [*_decorator_args(getattr(node, "decorator_list", [])), *a.defaults,
                         *(d for d in a.kw_defaults if d is not None)]  # evaluated in the enclosing scope
                inner = node.body if isinstance(node.body, list) else [node.body]
            elif isinstance(node, ast.ClassDef):
                outer = [*_decorator_args(node.decorator_list), *node.bases, *(k.value for k in node.keywords)]
                inner = node.body
            else:  # comprehension: the first iterable is evaluated outside
                outer = [node.generators[0].iter]
                inner = [getattr(node, f) for f in ("elt", "key", "value") if hasattr(node, f)]
                inner += [g.target for g in node.generators] + [c for g in node.generators for c in g.ifs]
                inner += [g.iter for g in node.generators[1:]]
            stack.extend((n, sc) for n in outer)
            stack.extend((n, new) for n in inner)
            continue
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loads.append(((node.id, ), sc))
            else:
                bind(node.id, sc)
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain = _chain(node)
            if chain is not None:
                loads.append((chain, sc))
                continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
            for a in node.names:
                bind(a.asname or a.name.split(".")[0], sc)
            continue
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bind(node.name, sc)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bind(node.name, sc)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bind(node.rest, sc)
        elif isinstance(node, ast.Global) and sc >= 0:
            scopes[sc][1].update(node.names)
        for field, value in ast.iter_fields(node):
            if field in _SKIP_FIELDS:
                continue
            if isinstance(value, ast.AST):
                stack.append((value, sc))
            elif isinstance(value, list):
                stack.extend((v, sc) for v in value if isinstance(v, ast.AST))

    free: set[tuple[str, ...]] = set()
    local: set[tuple[str, ...]] = set()
    for chain, sc in loads:
        name, innermost, is_local = chain[0], True, False
        while sc >= 0:
            bound, declared_global, is_class, parent = scopes[sc]
            if (innermost or not is_class) and name in bound and name not in declared_global:
                is_local = True
                break
            innermost, sc = False, parent
        (local if is_local else free).add(chain)
    return free, local, imports


def _import_bindings(imports: list[ast.AST], ns: dict) -> dict[str, tuple[str, str, Any]]:
    """name -> (module it was read from, its name there, object) for imports inside a function,
    looked up in sys.modules (nothing is imported here)."""
    out: dict[str, tuple[str, str, Any]] = {}
    package = ns.get("__package__") or str(ns.get("__name__", "")).rpartition(".")[0]
    for node in imports:
        if isinstance(node, ast.Import):
            for a in node.names:
                name = a.asname or a.name.split(".")[0]
                mod = sys.modules.get(a.name if a.asname else a.name.split(".")[0])
                if mod is not None:
                    out[name] = (mod.__name__, name, mod)
            continue
        try:
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
        except (ImportError, ValueError):
            continue
        mod = sys.modules.get(base)
        for a in node.names:
            if a.name == "*":
                continue
            obj = vars(mod).get(a.name, _MISSING) if mod is not None else _MISSING
            if obj is _MISSING:
                obj = sys.modules.get(f"{base}.{a.name}", _MISSING)
            if obj is not _MISSING:
                out[a.asname or a.name] = (base, a.name, obj)
    return out


def _index(tree: ast.Module) -> tuple[dict[str, list[ast.AST]], dict[int, list[ast.AST]]]:
    """Definitions by qualname ('f.<locals>.g', 'C.m') and by first line (decorators included)."""
    by_name: dict[str, list[ast.AST]] = {}
    by_line: dict[int, list[ast.AST]] = {}
    stack: list[tuple[ast.AST, str]] = [(n, "") for n in tree.body]
    while stack:
        node, prefix = stack.pop()
        if isinstance(node, _DEFS):
            q = prefix + node.name
            by_name.setdefault(q, []).append(node)
            by_line.setdefault(min([node.lineno] + [d.lineno for d in node.decorator_list]), []).append(node)
            prefix = q + ("." if isinstance(node, ast.ClassDef) else ".<locals>.")
        stack.extend((c, prefix) for c in _substatements(node))
    return by_name, by_line


# ----------------------------------------------------------------------------------------------
# the walk

class _Walker:
    def __init__(self, packages: tuple[str, ...]):
        self.packages = packages
        self.out: dict[str, str] = {}
        self.queued: set[str] = set()
        self.todo: list[tuple[str, str, Any]] = []
        self.trees: dict[str, tuple[ast.Module, dict, dict] | None] = {}
        self.lambdas: dict[str, dict[int, list[ast.AST]]] = {}
        self.stripped: set[int] = set()
        self.canon_ids: set[int] = set()

    # -- classification -------------------------------------------------------------------------
    def in_packages(self, modname: str | None) -> bool:
        return bool(modname) and any(modname == p or modname.startswith(p + ".") for p in self.packages)

    @staticmethod
    def _is_triton(modname: str | None) -> bool:
        return bool(modname) and (modname == "triton" or modname.startswith("triton."))

    def _classify(self, obj: Any, force: bool = False) -> tuple[str, str, Any, bool] | None:
        """(kind, key, target, included) if obj is code, else None. kind "jit" (target: (python
        function, innermost JIT wrapper)), "func" or "class". force: include it even from outside
        the packages (roots)."""
        jit = None
        for _ in range(8):  # unwrap autotuners, JIT wrappers, lru_cache wrappers, descriptors
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
            elif isinstance(obj, property) and obj.fget is not None:
                obj = obj.fget
            elif isinstance(obj, _JIT_WRAPPERS) and isinstance(getattr(obj, "fn", None),
                                                               (*_JIT_WRAPPERS, types.FunctionType)):
                jit, obj = obj, obj.fn
            elif not isinstance(obj, (type, types.FunctionType, types.MethodType, *_JIT_WRAPPERS)) and callable(obj) \
                    and hasattr(obj, "__wrapped__"):
                obj = obj.__wrapped__
            else:
                break
        if isinstance(obj, types.FunctionType):
            obj = inspect.unwrap(obj)
            kind = "func" if jit is None else "jit"
        elif isinstance(obj, type) and jit is None:
            kind = "class"
        else:
            return None
        mod = getattr(obj, "__module__", None)
        key = f"{mod}.{obj.__qualname__}"
        if kind == "jit":  # JIT code from any package (Liger's helpers too), triton's own excepted
            return kind, key, (obj, jit), not self._is_triton(mod)
        included = (force or self.in_packages(mod)) and not self._is_triton(mod) and mod not in _NEVER
        return kind, key, obj, included

    def code_ref(self, obj: Any, force: bool = False) -> str | None:
        """Key of obj if it is code, queueing it for the walk when it is included; else None."""
        c = self._classify(obj, force)
        if c is None:
            return None
        kind, key, target, included = c
        if included:
            self._queue(kind, key, target)
        return key

    def _queue(self, kind: str, key: str, obj: Any) -> None:
        if key not in self.queued:
            self.queued.add(key)
            self.todo.append((kind, key, obj))

    def canon(self, obj: Any, force: bool = False) -> str | None:
        """Canonical, address-free text of a value (walking the code it refers to), or None."""
        if isinstance(obj, enum.Enum):
            self.code_ref(type(obj))
            return f"{type(obj).__qualname__}.{obj.name}"
        if isinstance(obj, _PRIMITIVES):
            return repr(obj)
        if isinstance(obj, _constexpr):
            return f"constexpr({self.canon(obj.value) or self._opaque(obj.value)})"
        if inspect.ismodule(obj):
            return f"<module {obj.__name__}>"
        if id(obj) in self.canon_ids:
            return "<cycle>"
        self.canon_ids.add(id(obj))
        try:
            return self._canon_compound(obj, force)
        finally:
            self.canon_ids.discard(id(obj))

    def _canon_compound(self, obj: Any, force: bool) -> str | None:
        item = lambda v: self.canon(v) or self._opaque(v)  # noqa: E731
        t = type(obj)
        prefix = "" if t in (tuple, list, dict, set, frozenset) else f"{t.__qualname__}"
        if prefix and isinstance(obj, (tuple, list, dict, set, frozenset)):
            self.code_ref(t)
        if isinstance(obj, tuple):
            return prefix + "(" + "".join(item(v) + ", " for v in obj) + ")"
        if isinstance(obj, list):
            return prefix + "[" + ", ".join(item(v) for v in obj) + "]"
        if isinstance(obj, dict):
            return prefix + "{" + ", ".join(sorted(f"{item(k)}: {item(v)}" for k, v in obj.items())) + "}"
        if isinstance(obj, (set, frozenset)):
            return f"{prefix or t.__name__}({{" + ", ".join(sorted(item(v) for v in obj)) + "})"
        if isinstance(obj, functools.partial):
            args = [self.canon(obj.func, force) or self._opaque(obj.func)]
            args += [item(a) for a in obj.args] + [f"{k}={item(v)}" for k, v in sorted(obj.keywords.items())]
            return "functools.partial(" + ", ".join(args) + ")"
        if isinstance(obj, types.MethodType):
            func = self.canon(obj.__func__, force) or self._opaque(obj.__func__)
            return f"<method {func} of {item(obj.__self__)}>"
        key = self.code_ref(obj, force)
        if key is not None:
            return f"<{key}>"
        if dataclasses.is_dataclass(obj):
            # field values are hashed, code in fields by name only: it is reached through an
            # instance attribute (spec.eager), and walking it would pull in a registry's worth
            self.code_ref(t)
            named = lambda v: f"<{c[1]}>" if (c := self._classify(v)) else item(v)  # noqa: E731
            fields = ", ".join(f"{f.name}={named(getattr(obj, f.name, None))}" for f in dataclasses.fields(obj))
            return f"{t.__qualname__}({fields})"
        if (self.in_packages(t.__module__) or self._is_triton(t.__module__)) and t.__repr__ is not object.__repr__:
            try:
                r = repr(obj)
            except Exception:  # noqa: BLE001 - a broken __repr__ makes it opaque, not fatal
                return None
            if not _ADDRESS.search(r):
                self.code_ref(t)
                return r
        self.code_ref(t)  # an instance of one of our classes: its methods are what runs
        return None

    @staticmethod
    def _opaque(obj: Any) -> str:
        t = type(obj)
        return f"<{t.__module__}.{t.__qualname__}>"

    # -- roots and the queue --------------------------------------------------------------------
    def add_root(self, obj: Any) -> None:
        if inspect.ismodule(obj):
            self._queue("module", obj.__name__, obj)
        elif self.code_ref(obj, force=True) is None:
            c = self.canon(obj, force=True)
            self.out[f"<root {c if c is not None else self._opaque(obj)}>"] = c or ""

    def run(self) -> None:
        while self.todo:
            kind, key, obj = self.todo.pop()
            if kind == "module":
                self._module(key, obj)
            elif kind == "class":
                self._class(key, obj)
            else:
                self._function(key, *(obj if kind == "jit" else (obj, None)))

    def _tree(self, filename: str | None, ns: dict) -> tuple[ast.Module, dict, dict] | None:
        """(module AST, definitions by qualname, by first line) of a source file, once per walk."""
        if not filename:
            return None
        if filename not in self.trees:
            linecache.checkcache(filename)
            lines = linecache.getlines(filename, ns)
            entry = None
            try:
                tree = ast.parse("".join(lines)) if lines else None
            except SyntaxError:
                tree = None
            if tree is not None:
                entry = (tree, *_index(tree))
            self.trees[filename] = entry
        return self.trees[filename]

    def _lambdas(self, filename: str, tree: ast.Module) -> dict[int, list[ast.AST]]:
        """Lambdas by line (a full walk of the file: only done when a lambda is reached)."""
        if filename not in self.lambdas:
            by_line: dict[int, list[ast.AST]] = {}
            for n in ast.walk(tree):
                if isinstance(n, ast.Lambda):
                    by_line.setdefault(n.lineno, []).append(n)
            self.lambdas[filename] = by_line
        return self.lambdas[filename]

    @staticmethod
    def _parse_source(obj: Any) -> ast.AST | None:
        """Fallback: inspect.getsource + parse (code outside a readable file, e.g. a notebook cell)."""
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
        except (OSError, TypeError, SyntaxError, IndentationError):
            return None
        return tree.body[0] if len(tree.body) == 1 else tree

    def _emit(self, key: str, nodes: list[ast.AST], ns: "_Namespace", extra: str = "") -> None:
        if not nodes:
            self.out[key] = f"{key} <no source>{extra}"
            return
        for node in nodes:
            _strip_docstrings(node, self.stripped)
        self.out[key] = "\n".join(_unparse(n) for n in nodes) + extra
        for node in nodes:
            self._walk(node, ns)

    def _function(self, key: str, fn: types.FunctionType, jit: Any) -> None:
        ns: dict = getattr(fn, "__globals__", {})
        cells: dict[str, Any] = {}
        code = getattr(fn, "__code__", None)
        nodes: list[ast.AST] = []
        if code is not None:
            entry = self._tree(code.co_filename, ns)
            if entry is not None:
                nodes = [n for n in entry[2].get(code.co_firstlineno, []) if n.name == code.co_name]
                if not nodes and code.co_name == "<lambda>":
                    nodes = self._lambdas(code.co_filename, entry[0]).get(code.co_firstlineno, [])
            for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
                try:
                    cells[name] = cell.cell_contents
                except ValueError:  # empty cell
                    pass
        if not nodes:
            node = self._parse_source(fn)
            nodes = [node] if node is not None else []
        extra = ""
        if jit is not None:
            opts = {o: getattr(jit, o) for o in _JIT_OPTIONS if getattr(jit, o, None)}
            extra = f"\n# jit options {self.canon(opts)}" if opts else ""
        self._emit(key, nodes, _Namespace(ns, cells, key), extra)

    def _class(self, key: str, cls: type) -> None:
        ns = self._class_namespace(cls)
        nodes: list[ast.AST] = []
        entry = self._tree(ns.get("__file__"), ns)
        if entry is not None and "<locals>" not in cls.__qualname__:
            nodes = entry[1].get(cls.__qualname__, [])[-1:]  # the last definition wins at import
            nodes = [n for n in nodes if isinstance(n, ast.ClassDef)]
        if not nodes:
            node = self._parse_source(cls)
            nodes = [node] if node is not None else []
        self._emit(key, nodes, _Namespace(ns, {}, key))
        for base in cls.__bases__:
            self.code_ref(base)
        for name, value in vars(cls).items():  # class constants, monkeypatched ones included
            if name.startswith("__") or callable(value) or isinstance(value, (staticmethod, classmethod, property)):
                continue
            c = self.canon(value)
            if c is not None:
                self.out[f"{key}.{name}"] = c

    @staticmethod
    def _class_namespace(cls: type) -> dict:
        """The module globals a class was defined in: a method's __globals__ (right even after the
        module was purged from sys.modules and re-imported), else sys.modules."""
        generated = None
        for v in vars(cls).values():
            f = v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
            g, code = getattr(f, "__globals__", None), getattr(f, "__code__", None)
            if isinstance(g, dict) and code is not None and g.get("__name__") == cls.__module__:
                if not code.co_filename.startswith("<"):
                    return g
                generated = generated or g  # dataclass-generated methods: exec'd in the module globals
        if generated is not None:
            return generated
        mod = sys.modules.get(cls.__module__)
        return vars(mod) if mod is not None else {}

    def _module(self, key: str, mod: types.ModuleType) -> None:
        ns = vars(mod)
        entry = self._tree(getattr(mod, "__file__", None), ns)
        nodes: list[ast.AST] = [entry[0]] if entry is not None else []
        if nodes:
            _strip_docstrings(nodes[0], self.stripped)
        self.out[key] = _unparse(nodes[0]) if nodes else f"{key} <no source>"
        for name, value in list(ns.items()):
            if not name.startswith("__"):
                self._reach(key, name, value, (), trusted=True)

    # -- references -----------------------------------------------------------------------------
    def _walk(self, node: ast.AST, ns: "_Namespace") -> None:
        free, local, imports = _references(node)
        for chain in free:
            found = ns.lookup(chain[0])
            if found is not None:
                self._reach(found[0], chain[0], found[1], chain[1:], trusted=True)
        if imports and local:
            bound = _import_bindings(imports, ns.globals)
            for chain in local:
                if chain[0] in bound:
                    mod, name, obj = bound[chain[0]]
                    self._reach(mod, name, obj, chain[1:], trusted=self.in_packages(mod))

    def _reach(self, owner: str, name: str, obj: Any, rest: tuple[str, ...], trusted: bool) -> None:
        """obj was read as `name` from namespace `owner`, then the attributes `rest` from it."""
        while True:
            if inspect.ismodule(obj):
                if not rest:
                    return
                owner, name, rest = obj.__name__, rest[0], rest[1:]
                trusted = self.in_packages(owner)
                obj = vars(obj).get(name, _MISSING)
                if obj is _MISSING:
                    return
                continue
            key = self.code_ref(obj)
            if key is not None:
                if rest and isinstance(obj, type) and self.in_packages(obj.__module__):
                    attr = inspect.getattr_static(obj, rest[0], _MISSING)
                    # methods are part of the class's source; constants get their own key
                    if attr is _MISSING or self._classify(attr) is not None:
                        return
                    owner, name, obj, rest, trusted = key, rest[0], attr, rest[1:], True
                    continue
                return
            if trusted:
                if f"{owner}.{name}" in _REGISTRIES:
                    self.out.setdefault(f"{owner}.{name}", "<registry>")
                    return
                c = self.canon(obj)
                if c is not None:
                    self.out.setdefault(f"{owner}.{name}", c)
            return


class _Namespace:
    """Where a function's free names resolve: closure cells (keyed under the function), then its
    module's globals (keyed under the module)."""

    def __init__(self, globals_: dict, cells: dict[str, Any], key: str):
        self.globals = globals_
        self.cells = cells
        self.key = key
        self.module = str(globals_.get("__name__", "?"))

    def lookup(self, name: str) -> tuple[str, Any] | None:
        if name in self.cells:
            return f"{self.key}.<closure>", self.cells[name]
        if name in self.globals:
            return self.module, self.globals[name]
        return None
