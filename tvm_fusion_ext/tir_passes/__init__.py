"""TIR scheduling passes: anchor loop fusion (GraphTurbo section 4.1) with register-tiled
contraction anchors (``register_tile``: GotoBLAS micro-kernels), two chained contractions as one
loop nest (``contraction_chain``), the plain fallback, the default
schedule pass built from them, ``VectorErf``, ``VectorExp`` and ``VectorTanh`` (float32 erf, exp
and tanh as vectorisable polynomials), ``DropUnitIters`` (trivial block bindings for dlight's GPU
rules), ``FlashAttention`` and ``CPUAttention`` (an attention kernel, recognised by
``match_attention``, as one FlashAttention GPU kernel / one cache-blocked CPU loop nest), APOLLO's reduction canonical forms (section 4.1), and APOLLO's stitching on
CUDA: ``SharedRowReduction`` (memory stitching, section 4.2) and ``GPUParallelStitch``
(parallelism stitching, section 4.3)."""

from .attention_pattern import AttentionPattern, match_attention
from .contraction_chain import ContractionChain
from .cpu_attention import CPUAttention, cpu_attention_func
from .default_schedule import DefaultSchedule, default_schedule_pass
from .flash_attention import FlashAttention, flash_attention_func
from .gpu_parallel_stitch import GPUParallelStitch
from .gpu_row_stitch import SharedRowReduction
from .loop_fusion import AnchorLoopFusion
from .plain_schedule import PlainSchedule
from .reduction_forms import ReductionForm, canonicalize_reduction, reduction_form
from .unit_iters import DropUnitIters
from .vector_erf import VectorErf
from .vector_exp import VectorExp
from .vector_tanh import VectorTanh

__all__ = ["AnchorLoopFusion", "AttentionPattern", "CPUAttention", "ContractionChain", "DefaultSchedule", "DropUnitIters",
           "FlashAttention", "GPUParallelStitch", "PlainSchedule", "ReductionForm", "SharedRowReduction",
           "VectorErf", "VectorExp", "VectorTanh", "canonicalize_reduction", "cpu_attention_func", "default_schedule_pass",
           "flash_attention_func", "match_attention", "reduction_form"]
