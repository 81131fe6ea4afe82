"""A layered drawing of one block's graph with each kernel's ops inside one box (no Graphviz).

Two levels, both layered by longest path (every node one row below its lowest producer):

* inside a box, the kernel's ops in rows by their longest path from the kernel's inputs;
* the boxes (and the bindings no kernel runs: tuples, items, library calls) form a DAG of units,
  layered the same way; an edge spanning several rows gets one zero-width waypoint per row it
  crosses, so it runs beside the boxes, not through them (Sugiyama et al.'s dummy nodes).

Within a row, units are ordered by the barycenter of their producers (a few down and up sweeps
reduce crossings) and placed at the mean x of their producers, pushed right to avoid overlaps and
re-centred. Boxes never overlap, so a group always reads as one box.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from ..analysis.graph import DataflowGraph

NODE_W, NODE_H = 132, 34  # one op
NODE_GAP, ROW_GAP = 12, 18  # between ops inside a box
PAD, HEADER = 8, 18  # box padding and its title line
LANE, TRACK = 12, 3  # a box's left and right margins, where edges skipping its rows run
LONE_HEADER, LONE_PAD = 12, 5  # a box around one op: a small title, a thin margin
SUBTITLE = 12  # a second title line (kept bytes, GraphTurbo's instances)
UNIT_GAP, LAYER_GAP = 20, 30  # between boxes in a row, between rows
SWEEPS = 4


@dataclass
class Unit:
    """A box (a kernel's ops) or a lone binding, with its members' positions relative to it."""

    members: list[int]
    box: int | None  # position in ``boxes``; None for a lone binding outside every box
    subtitle: bool = False
    width: float = NODE_W
    height: float = NODE_H
    x: float = 0.0  # left
    y: float = 0.0  # top
    layer: int = 0
    offsets: dict[int, tuple[float, float]] = field(default_factory=dict)  # node -> (dx, dy) of its top-left
    row: dict[int, int] = field(default_factory=dict)  # node -> its row inside the unit
    rows: int = 1
    tracks: dict[bool, int] = field(default_factory=dict)  # edges routed so far per margin (left?)

    def lane(self, node: int) -> float:
        """x of the margin on ``node``'s side of the box."""
        left = self.x + self.offsets[node][0] + NODE_W / 2 < self.x + self.width / 2
        return self.x + LANE / 2 if left else self.x + self.width - LANE / 2

    def track(self, node: int) -> float:
        """x of the next edge in the margin on ``node``'s side: three tracks, used in turn."""
        centre = self.lane(node)
        left = centre < self.x + self.width / 2
        used = self.tracks[left] = self.tracks.get(left, 0) + 1
        return centre + (0, TRACK, -TRACK)[(used - 1) % 3]


@dataclass
class Layout:
    units: list[Unit]
    nodes: dict[int, tuple[float, float]]  # node -> top-left
    edges: list[tuple[int, int, list[tuple[float, float]]]]  # (producer, consumer, path points)
    width: float
    height: float


def layout_block(graph: DataflowGraph, boxes: list[list[int]], subtitles: list[bool] | None = None
                 ) -> Layout:
    """Lay out ``graph`` with each list of ``boxes`` drawn in one box (``subtitles``: which boxes
    have a second title line)."""
    subtitles = subtitles or [False] * len(boxes)
    units = [Unit(sorted(members), b, sub) for b, (members, sub) in enumerate(zip(boxes, subtitles))]
    boxed = {m for members in boxes for m in members}
    units += [Unit([n.index], None) for n in graph.nodes if n.index not in boxed]
    units.sort(key=lambda u: u.members[0])
    unit_of: dict[int, int] = {}
    for ui, unit in enumerate(units):
        for m in unit.members:
            unit_of[m] = ui
        _layout_inside(graph, unit)
    preds = [sorted({unit_of[p] for m in u.members for p in graph.nodes[m].inputs} - {ui})
             for ui, u in enumerate(units)]
    _assign_layers(units, preds)
    rows, chain = _insert_waypoints(units, preds)
    up, down = _neighbours(chain)
    _order_rows(rows, up, down)
    layer_y = _place(rows, units, up)
    nodes = {m: (u.x + dx, u.y + dy) for u in units for m, (dx, dy) in u.offsets.items()}
    edges = []
    for node in graph.nodes:
        for p in node.inputs:
            source, sink = units[unit_of[p]], units[unit_of[node.index]]
            crossed = chain.get((unit_of[p], unit_of[node.index]), [])
            waypoints = [pt for w in crossed for pt in w.points(layer_y)]
            edges.append((p, node.index, _route(p, node.index, source, sink, nodes, waypoints)))
    width = max((u.x + u.width for u in units), default=0) + UNIT_GAP
    height = max((u.y + u.height for u in units), default=0) + UNIT_GAP
    return Layout(units, nodes, edges, width, height)


def _layout_inside(graph: DataflowGraph, unit: Unit) -> None:
    """Rows of a box's members by longest path inside the box; sets the box's size."""
    inside = set(unit.members)
    row: dict[int, int] = {}
    for m in unit.members:  # binding order is topological
        row[m] = max((row[p] + 1 for p in graph.nodes[m].inputs if p in inside), default=0)
    rows: list[list[int]] = [[] for _ in range(max(row.values()) + 1)]
    for m in unit.members:
        rows[row[m]].append(m)
    for r in range(1, len(rows)):
        prev = {m: i for i, m in enumerate(rows[r - 1])}
        rows[r].sort(key=lambda m: _mean([prev[p] for p in graph.nodes[m].inputs if p in prev], m))
    if unit.box is None:
        top, side, bottom = 0, 0, 0
    elif len(unit.members) == 1:
        top, side, bottom = LONE_HEADER, LONE_PAD, LONE_PAD
    else:
        top, side, bottom = PAD + HEADER, LANE, PAD
    top += SUBTITLE if unit.subtitle else 0
    widest = max(len(r) for r in rows)
    unit.row, unit.rows = row, len(rows)
    unit.width = widest * NODE_W + (widest - 1) * NODE_GAP + 2 * side
    unit.height = top + len(rows) * NODE_H + (len(rows) - 1) * ROW_GAP + bottom
    for r, members in enumerate(rows):
        span = len(members) * NODE_W + (len(members) - 1) * NODE_GAP
        left = (unit.width - span) / 2
        for i, m in enumerate(members):
            unit.offsets[m] = (left + i * (NODE_W + NODE_GAP), top + r * (NODE_H + ROW_GAP))


def _route(producer: int, consumer: int, source: Unit, sink: Unit, nodes: dict, waypoints: list) -> list:
    """Points of one edge. It leaves a node's bottom and enters the next one's top, except where
    other ops of the same box lie in the way: then it runs in the box's margin and meets the op
    from the side."""
    (px, py), (cx, cy) = nodes[producer], nodes[consumer]
    out_side = (px + NODE_W if source.lane(producer) > px else px, py + NODE_H / 2)
    in_side = (cx + NODE_W if sink.lane(consumer) > cx else cx, cy + NODE_H / 2)
    if source is sink:
        if source.row[consumer] - source.row[producer] <= 1:
            return [(px + NODE_W / 2, py + NODE_H), (cx + NODE_W / 2, cy)]
        lane = source.track(producer)
        return [out_side, (lane, out_side[1]), (lane, in_side[1]), in_side]
    if source.box is not None and source.row[producer] < source.rows - 1:
        lane = source.track(producer)
        start = [out_side, (lane, out_side[1]), (lane, source.y + source.height)]
    else:
        start = [(px + NODE_W / 2, py + NODE_H)]
    if sink.box is not None and sink.row[consumer] > 0:
        lane = sink.track(consumer)
        end = [(lane, sink.y), (lane, in_side[1]), in_side]
    else:
        end = [(cx + NODE_W / 2, cy)]
    return [*start, *waypoints, *end]


def _mean(values: list[float], default: float) -> float:
    return sum(values) / len(values) if values else default


def _assign_layers(units: list[Unit], preds: list[list[int]]) -> None:
    """Longest-path layering of the unit DAG (units are in a topological order)."""
    for ui, unit in enumerate(units):
        unit.layer = max((units[p].layer + 1 for p in preds[ui]), default=0)


@dataclass
class _Waypoint:
    """Where an edge crosses a row it does not end in."""

    layer: int
    x: float = 0.0

    def points(self, layer_y: list[tuple[float, float]]) -> list[tuple[float, float]]:
        top, bottom = layer_y[self.layer]
        return [(self.x, top), (self.x, bottom)]


def _insert_waypoints(units: list[Unit], preds: list[list[int]]):
    """Rows of units and waypoints; ``chain[(p, c)]``: the waypoints of unit edge p -> c."""
    rows: list[list] = [[] for _ in range(max(u.layer for u in units) + 1)]
    for ui, unit in enumerate(units):
        rows[unit.layer].append(ui)
    chain: dict[tuple[int, int], list[_Waypoint]] = {}
    for c, ps in enumerate(preds):
        for p in ps:
            waypoints = [_Waypoint(layer) for layer in range(units[p].layer + 1, units[c].layer)]
            for w in waypoints:
                rows[w.layer].append(w)
            chain[(p, c)] = waypoints
    return rows, chain


def _neighbours(chain) -> tuple[dict, dict]:
    """For every row item (by :func:`_key`), its items in the row above and in the row below."""
    up: dict = {}
    down: dict = {}
    for (p, c), waypoints in chain.items():
        path = [p, *waypoints, c]
        for a, b in pairwise(path):
            up.setdefault(_key(b), []).append(a)
            down.setdefault(_key(a), []).append(b)
    return up, down


def _key(item):
    return id(item) if isinstance(item, _Waypoint) else item


def _order_rows(rows: list[list], up: dict, down: dict) -> None:
    """Barycenter ordering: sweeps down (by producers) and up (by consumers)."""
    for sweep in range(SWEEPS):
        downward = sweep % 2 == 0
        for r in (range(1, len(rows)) if downward else range(len(rows) - 2, -1, -1)):
            pos = {_key(item): i for i, item in enumerate(rows[r - 1] if downward else rows[r + 1])}
            adjacent = up if downward else down
            current = {_key(item): i for i, item in enumerate(rows[r])}
            rows[r].sort(key=lambda item: _mean([pos[_key(a)] for a in adjacent.get(_key(item), [])
                                                 if _key(a) in pos], current[_key(item)]))


def _place(rows: list[list], units: list[Unit], up: dict) -> list[tuple[float, float]]:
    """x: at the mean centre of the producers, pushed right past the left neighbour, the row then
    shifted back so it is centred on its wishes; y: rows one under the other, each as tall as its
    tallest box. Returns each row's (top, bottom)."""
    centre: dict = {}
    layer_y = []
    y = float(UNIT_GAP)
    for row in rows:
        widths = [0.0 if isinstance(item, _Waypoint) else units[item].width for item in row]
        wishes, cursor = [], 0.0
        for item, w in zip(row, widths):
            wishes.append(_mean([centre[_key(a)] for a in up.get(_key(item), [])], cursor + w / 2))
            cursor += w + UNIT_GAP
        placed: list[float] = []
        for i, (wish, w) in enumerate(zip(wishes, widths)):
            placed.append(max(wish, placed[-1] + (widths[i - 1] + w) / 2 + UNIT_GAP) if placed else wish)
        shift = _mean([wish - x for wish, x in zip(wishes, placed)], 0.0)
        height = max((units[i].height for i in row if not isinstance(i, _Waypoint)), default=0.0)
        for item, x, w in zip(row, placed, widths):
            centre[_key(item)] = x + shift
            if isinstance(item, _Waypoint):
                item.x = x + shift
            else:
                units[item].x, units[item].y = x + shift - w / 2, y
        layer_y.append((y, y + height))
        y += height + LAYER_GAP
    left = min(item.x if isinstance(item, _Waypoint) else units[item].x for row in rows for item in row)
    for row in rows:
        for item in row:
            if isinstance(item, _Waypoint):
                item.x += UNIT_GAP - left
            else:
                units[item].x += UNIT_GAP - left
    return layer_y
