"""``FuseOpsDominator``: Relax ``FuseOps`` re-implemented as a partitioner plus the shared
materialiser, with backward (pre-dominator) and combined fusion (tvm-backward-operator-fusion
sections 4, 5 and 7).

``FuseOpsDominator()`` (forward) is a drop-in replacement for ``relax.transform.FuseOps`` (same
constructor contract, same grouping, same output module); ``direction="backward"`` fuses each op into
its immediate pre-dominator, ``direction="both"`` runs forward then backward. The algorithms are in
:mod:`tvm_fusion_ext.partitioners.dominator`; the rewrite is
:class:`~tvm_fusion_ext.relax_passes.materialize_partition.MaterializePartition`.

The strategies ``dominator-forward``, ``dominator-backward`` and ``dominator-both`` run it
(:mod:`tvm_fusion_ext.pipelines.strategies`). Backward fusions consult the profitability check of
:mod:`tvm_fusion_ext.cost` on CPU targets (``cost_check``): a backward merge is kept only where its
kernel is predicted no slower than the kernels it merges.
"""

from __future__ import annotations

import tvm

from ..cost import ProfitabilityCheck, profitability_for
from ..partitioners.dominator import DIRECTIONS, FORWARD, MAX_FUSED_OPS, DominatorPartitioner
from ..registration import register_pass
from .materialize_partition import MaterializePartition

MAX_DEPTH_CONFIG = "relax.FuseOps.max_depth"


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.FuseOpsDominator")
class FuseOpsDominator:
    """Group the bindings of every dataflow block by dominator-tree fusion (``FuseOps``' contract).

    ``fuse_opt_level``: -1 takes the PassContext's opt level, 0 disables fusion (as
    ``relax.transform.FuseOps``). ``direction``: ``"forward"`` (post-dominators, exactly FuseOps),
    ``"backward"`` (pre-dominators) or ``"both"``. ``max_depth``: the most ops in one group; ``None``
    reads the PassContext config ``relax.FuseOps.max_depth``, else 256 (``kMaxFusedOps``).
    ``cost_check``: backward merges consult the profitability check (CPU targets; forward fusion is
    FuseOps' and never checked); ``profitability`` replaces the check, e.g. with fixed rates.
    ``backward_epilogues``: backward fusion also gives a conv / matmul its element-wise epilogue
    (:mod:`~tvm_fusion_ext.partitioners.dominator`; ``False``: the mirrored rules alone).
    Functions that are ``Primitive`` or carry a ``Codegen`` attribute are left alone.
    """

    def __init__(self, fuse_opt_level: int = -1, direction: str = FORWARD, max_depth: int | None = None,
                 cost_check: bool = True, profitability: ProfitabilityCheck | None = None,
                 backward_epilogues: bool = True):
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}; expected one of {', '.join(DIRECTIONS)}")
        self.fuse_opt_level = int(fuse_opt_level)
        self.direction = direction
        self.max_depth = max_depth
        self.cost_check = cost_check
        self.profitability = profitability
        self.backward_epilogues = backward_epilogues

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        opt_level = ctx.opt_level if self.fuse_opt_level == -1 else self.fuse_opt_level
        max_depth = self.max_depth
        if max_depth is None:
            max_depth = int(ctx.config.get(MAX_DEPTH_CONFIG, MAX_FUSED_OPS))
        profit = None
        if self.cost_check and self.direction != FORWARD:
            profit = self.profitability or profitability_for(tvm.target.Target.current(allow_none=True))
        partitioner = DominatorPartitioner(self.direction, opt_level, max_depth,
                                           profit.accepts if profit is not None else None,
                                           self.backward_epilogues)
        return MaterializePartition(partitioner)(mod)

