"""Which fields of a resource a view reads, below the top level as well.

:func:`read_tree` follows every path of a view through its syntax tree and notes
each field it navigates to: ``participant.actor.reference`` read inside a
``forEach: participant`` notes ``participant`` → ``actor`` → ``reference``. The
projected read (:mod:`toolkit.viewdefs.load`) then reads of each noted element only
its noted children, so that Polars reads a fraction of the bytes and nesting; a
field the view never names cannot change its rows.

The tree is conservative: a field is kept **whole** (every child, exact) where the
view may use its whole value, not only some children:

* where the view names it but none of its children (a column, ``exists()``,
  ``count()``, a ``forEach`` whose rows read nothing of the item);
* where it is an operand of ``=``, ``!=``, ``~``, ``!~``, ``|``, ``in``,
  ``contains`` or of any other operator (complex values compare, and a union
  deduplicates, by every child);
* where a function the walk does not know takes it (``children()``, ...), and
  where a ``repeat`` reaches it (each level below is kept whole);
* the whole resource where the view reads ``%resource`` (no projection at all).

A kept element keeps its presence: an item whose noted children are all absent is
still an item (an empty object, read by Polars as a struct of nulls, not a null),
so ``forEach``, ``exists()`` and ``count()`` see it as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolkit.viewdefs import fhirpath as fp
from toolkit.viewdefs.definition import Select, View

__all__ = ["Tree", "read_tree"]

Tree = dict[str, Any]
"""Field name → its :data:`Tree` of children read, or None where it is read whole."""

Pos = tuple[str, ...]
Focus = frozenset[Pos]

_NONE: Focus = frozenset()
_ROOT: Focus = frozenset({()})

_ITERATING = {"where", "exists", "all", "select"}
"""Functions whose argument is evaluated once per item of their input."""
_KEEPING = {"first", "last", "where", "ofType", "single", "tail", "skip", "take"}
"""Functions whose result is (some of) the items of their input, as they are."""
_COUNTING = {"exists", "empty", "count", "hasValue"}
"""Functions that only need to know whether (how many) items there are."""


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    whole: bool = False

    def tree(self) -> Tree | None:
        if self.whole or not self.children:
            return None
        return {name: child.tree() for name, child in self.children.items()}


class _Walk:
    def __init__(self) -> None:
        self.root = _Node()

    def at(self, pos: Pos) -> _Node:
        node = self.root
        for name in pos:
            node = node.children.setdefault(name, _Node())
        return node

    def whole(self, focus: Focus) -> Focus:
        for pos in focus:
            self.at(pos).whole = True
        return focus

    def child(self, focus: Focus, name: str) -> Focus:
        out = frozenset((*pos, name) for pos in focus)
        for pos in out:
            self.at(pos)
        return out

    def path(self, node: fp.Node, focus: Focus) -> Focus:
        """The places ``node`` evaluated at ``focus`` may give (its reads noted)."""
        if isinstance(node, fp.This):
            return focus
        if isinstance(node, fp.Literal):
            return _NONE
        if isinstance(node, fp.Constant):
            if node.name in {"resource", "rootResource", "context"}:
                return self.whole(_ROOT)
            return _NONE
        if isinstance(node, fp.Member):
            return self.child(self.path(node.base, focus), node.name)
        if isinstance(node, fp.Index):
            self.whole(self.path(node.index, focus))
            return self.path(node.base, focus)
        if isinstance(node, fp.Unary):
            return self.whole(self.path(node.operand, focus))
        if isinstance(node, fp.Binary):
            left = self.whole(self.path(node.left, focus))
            right = self.whole(self.path(node.right, focus))
            return left | right
        if isinstance(node, fp.Call):
            return self.call(node, focus)
        return self.whole(focus)

    def call(self, node: fp.Call, focus: Focus) -> Focus:
        name = node.name
        base = self.path(node.base, focus)
        if name in {"ofType", "is", "as"}:
            # a contained resource's type is its resourceType
            self.child(base, "resourceType")
        if name == "getResourceKey":
            return self.whole(self.child(base, "id"))
        if name == "getReferenceKey":
            return self.whole(self.child(base, "reference"))
        if name == "extension":
            found = self.child(base, "extension")
            self.whole(self.child(found, "url"))
            self.arguments(node, focus)
            return found
        self.arguments(node, base if name in _ITERATING else focus)
        if name in _KEEPING:
            return base
        if name in _COUNTING:
            return _NONE
        # any other function (string functions, not(), join(), boundaries, ...) may
        # use its input's whole value
        return self.whole(base)

    def arguments(self, node: fp.Call, focus: Focus) -> None:
        """Each argument's reads (a type specifier, ``ofType(Coding)``'s, reads nothing)."""
        if node.name in {"ofType", "is", "as"}:
            return
        for arg in node.args:
            self.whole(self.path(arg, focus))

    def select(self, node: Select, focus: Focus) -> None:
        if node.repeat:
            items: Focus = _NONE
            for path in node.repeat:
                items |= self.whole(self.path(path, focus))
        elif node.for_each is not None:
            items = self.path(node.for_each, focus)
        else:
            items = focus
        for col in node.columns:
            self.whole(self.path(col.path, items))
        for sub in (*node.selects, *node.union):
            self.select(sub, items)


def read_tree(view: View) -> Tree | None:
    """The fields ``view`` reads, as a :data:`Tree` from the resource; None: the whole resource."""
    walk = _Walk()
    for node, _where in view.where:
        walk.whole(walk.path(node, _ROOT))
    walk.select(view.root, _ROOT)
    tree = walk.root.tree()
    if tree is None:
        return None
    # the read always needs the resource's type and id
    tree.setdefault("resourceType", None)
    tree.setdefault("id", None)
    return tree
