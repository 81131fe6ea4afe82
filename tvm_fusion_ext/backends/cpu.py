"""The CPU backend (target key ``"cpu"``: ``llvm`` and ``c`` targets).

Graph: batch norms after convs folded into the conv weights
(:class:`~tvm_fusion_ext.relax_passes.fold_batch_norm.FoldBatchNormIntoConv`), then networks with
depthwise convs in NHWC (:class:`~tvm_fusion_ext.relax_passes.channels_last.ChannelsLast`).
Scheduling: ``unscheduled`` adds nothing; ``untuned`` is the default schedule
(:mod:`tvm_fusion_ext.tir_passes.default_schedule`), with constant weights marked layout-free
before it and their packing folded into constants after it (the order of TVM's
``relax.pipeline.static_shape_tuning_pipeline`` with ``cpu_weight_prepack=True``; each distinct
packing function built once, :class:`~tvm_fusion_ext.relax_passes.fold_weight_layouts.FoldWeightLayouts`), followed by
:class:`~tvm_fusion_ext.tir_passes.vector_erf.VectorErf`,
:class:`~tvm_fusion_ext.tir_passes.vector_exp.VectorExp` and
:class:`~tvm_fusion_ext.tir_passes.vector_tanh.VectorTanh` (float32 erf, exp and tanh as
vectorisable polynomials), and every kernel simplified again: the reshapes the schedule inlines into an
epilogue leave ``i // 197 * 197 + i % 197`` indices that LLVM cannot see through, and a GEMM
with such an epilogue (ViT's MLP up-projection with its GELU, batch 8) kept its accumulators in
memory and ran 2.2x slower than the GEMM and the GELU as two kernels; ``tuned`` first applies the MetaSchedule records of the database in scope
(``ms.database``) and gives whatever the database lacks the untuned schedule. Lowering is TVM's
own, from ``python/tvm/relax/backend/cpu_generic/pipeline.py``, with the tuples of several-output
kernels forwarded to their items between dataflow lowering and memory planning
(:data:`DROP_TUPLE_ALIASES`).
"""

from __future__ import annotations

import tvm
from tvm import relax, s_tir
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from ..relax_passes.channels_last import ChannelsLast
from ..relax_passes.fold_batch_norm import FoldBatchNormIntoConv
from ..relax_passes.fold_weight_layouts import FoldWeightLayouts
from ..relax_passes.pointwise_conv_as_matmul import PointwiseConvAsMatmul
from ..tir_passes.default_schedule import default_schedule_pass
from ..tir_passes.vector_erf import VectorErf
from ..tir_passes.vector_exp import VectorExp
from ..tir_passes.vector_tanh import VectorTanh
from .registry import register_backend


@register_backend("cpu")
class CPUBackend:
    def graph_passes(self, target: tvm.target.Target) -> list:
        return [FoldBatchNormIntoConv(), ChannelsLast(), PointwiseConvAsMatmul(target)]

    def schedule_passes(self, target: tvm.target.Target, policy: str) -> list:
        if policy == "unscheduled":
            return []
        untuned = [relax.transform.AttachAttrLayoutFreeBuffers(), default_schedule_pass(target),
                   relax.transform.SplitLayoutRewritePreproc(), FoldWeightLayouts(), relax.transform.FoldConstant(),
                   relax.transform.DeadCodeElimination(), VectorErf(), VectorExp(), VectorTanh(),
                   s_tir.transform.StmtSimplify()]
        if policy == "tuned":
            return [relax.transform.MetaScheduleApplyDatabase(enable_warning=False), *untuned]
        return untuned

    def lowering_passes(self, target: tvm.target.Target) -> list:
        return [*cpu_generic.dataflow_lower_passes(target), *DROP_TUPLE_ALIASES, *cpu_generic.finalize_passes(target)]


# ``CallTIRRewrite`` leaves ``lv = (alloc, alloc1); a = lv[0]; b = lv[1]`` after every kernel with
# several outputs. Forwarding the items and dropping the unused tuple saves the VM a
# ``vm.builtin.make_tuple`` call per such kernel (and a kill per alias): APOLLO's unrolled LSTM had
# 31 more such calls per run than stock's, at a few microseconds per kernel of work.
DROP_TUPLE_ALIASES = (relax.transform.CanonicalizeBindings(), relax.transform.DeadCodeElimination())
