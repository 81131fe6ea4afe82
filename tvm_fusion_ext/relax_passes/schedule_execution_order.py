"""``ScheduleExecutionOrder``: reorder each dataflow block BFS or DFS, whichever peaks lower.

MindSpore's execution-order scheduling (mindspore-jit-graph-kernel-fusion, "Execution Order
Scheduling"); the orders and the memory model are in :mod:`tvm_fusion_ext.analysis.execution_order`.
Run it after fusion, when each binding is one kernel. Bindings keep their variables; only their
order changes, so the result is equivalent by construction.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from ..analysis.execution_order import choose_order
from ..analysis.graph import build_graphs
from ..ir_utils import non_primitive_functions
from ..registration import register_pass

_LOG = logging.getLogger(__name__)


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.ScheduleExecutionOrder")
class ScheduleExecutionOrder:
    """Reorder every dataflow block of every non-primitive Relax function.

    ``self.report`` maps ``(function, block index)`` to the :class:`OrderChoice` made (strategy,
    peak live bytes, and both candidates' peaks).
    """

    def __init__(self):
        self.report: dict = {}

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod = mod.clone()
        for gvar, func in non_primitive_functions(mod):
            if not isinstance(func.body, relax.SeqExpr):
                continue
            graphs = {g.block_index: g for g in build_graphs(mod, gvar.name_hint)}
            blocks = list(func.body.blocks)
            changed = False
            for index, graph in graphs.items():
                choice = choose_order(graph)
                self.report[(gvar.name_hint, index)] = choice
                _LOG.info("%s block %d: %s order, peak %d bytes (bfs %d, dfs %d)", gvar.name_hint,
                          index, choice.strategy, choice.peak_bytes, choice.peaks["bfs"],
                          choice.peaks["dfs"])
                if choice.order != list(range(len(graph))):
                    blocks[index] = relax.DataflowBlock([graph.bindings[i] for i in choice.order])
                    changed = True
            if changed:
                # Normalised, so that the new SeqExpr carries its type (well-formedness needs it).
                body = relax.BlockBuilder(mod).normalize(relax.SeqExpr(blocks, func.body.body))
                mod[gvar] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
        return mod
