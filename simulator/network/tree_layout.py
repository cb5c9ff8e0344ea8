"""Where each member sits in the binary tree of ``network.collective = "tree"`` (``staged.py``).

The tree puts member p under member (p-1) // 2. Each parent-child pair whose regions differ crosses
a backbone twice per sync (up in the reduce, down in the broadcast), and the pairs of one level
that cross the same backbone share it. Under ``network.ring_order = "ranked"`` the members sit in
rank order. Under "optimised" they sit so that as few pairs as possible cross a backbone:

* the members come grouped by region, the regions in their ring cycle (``Topology.ring``);
* they are laid out in pre-order over the tree's shape, so that each region fills a few whole
  subtrees instead of alternating with the others level by level. The pre-order visits the smaller
  child subtree first, or the larger first;
* of these two layouts and the ranked one, the layout kept crosses the fewest backbones, then has
  the fewest crossings in any one level, then comes first. So "optimised" never crosses more than
  the ranked order does.

Two regions of two members, us, eu, us, eu by rank: the ranked tree crosses once (root us, its
children eu and us, the eu child's child eu), while the ring's grouping laid out level by level
(us, us, eu, eu) would cross twice.
"""

from __future__ import annotations

from collections.abc import Callable

from .topology import Topology


def tree_layout(ring: tuple[int, ...], topology: Topology, order: str) -> tuple[int, ...]:
    """The members of ``ring`` (in ``Topology.ring``'s order) in the tree's positions."""
    ranked = tuple(sorted(ring))
    if order == "ranked" or not topology.backbones:
        return ranked
    region = topology.named_region
    layouts = [preorder(ring, smaller_first=True), preorder(ring, smaller_first=False), ranked]
    return min(layouts, key=lambda layout: crossings(layout, region))


def crossings(layout: tuple[int, ...], region: Callable[[int], str]) -> tuple[int, int]:
    """(parent-child pairs in different regions, the most such pairs in one level)."""
    by_level: dict[int, int] = {}
    for position in range(1, len(layout)):
        if region(layout[position]) != region(layout[(position - 1) // 2]):
            level = (position + 1).bit_length() - 1
            by_level[level] = by_level.get(level, 0) + 1
    return sum(by_level.values()), max(by_level.values(), default=0)


def preorder(ring: tuple[int, ...], smaller_first: bool) -> tuple[int, ...]:
    """``ring``'s members placed in turn at the positions of a pre-order walk over the tree's shape."""
    size = len(ring)
    layout = [0] * size
    for member, position in zip(ring, walk(size, smaller_first)):
        layout[position] = member
    return tuple(layout)


def walk(size: int, smaller_first: bool) -> list[int]:
    """The positions 0 .. size-1 of a binary heap's shape in pre-order, the smaller (or larger) child
    subtree first; equal subtrees left first."""
    order: list[int] = []
    stack = [0]
    while stack:
        position = stack.pop()
        order.append(position)
        children = [child for child in (2 * position + 1, 2 * position + 2) if child < size]
        children.sort(key=lambda child: subtree_size(child, size), reverse=not smaller_first)
        stack.extend(reversed(children))  # the first child is walked first
    return order


def subtree_size(position: int, size: int) -> int:
    """Positions under ``position`` (itself included) in a binary heap of ``size`` positions."""
    count, first, width = 0, position, 1
    while first < size:
        count += min(width, size - first)
        first, width = 2 * first + 1, 2 * width
    return count
