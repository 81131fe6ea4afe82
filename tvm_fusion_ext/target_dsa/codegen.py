"""C code generation for DSA targets: ``target.build.c`` overridden from Python.

For a target whose keys hold ``"dsa"``, the source TVM's C codegen emits for the lowered kernels
is extended: when a kernel calls it, a definition follows of the matrix-unit instruction ``dsa_mme_gemm_f32`` (host emulation of
one MME tile, see :mod:`.intrinsics`), and every kernel's model (:mod:`.kernel_model`) is appended
as a ``/* DSA-KERNEL-MODEL {...} */`` comment, so an executable carries what the simulator needs.
Storage scopes (``local.dsa_lb``, ``global.dsa_gb``) appear in the allocation names; DMA copies
are the loops that move data between them. :func:`dump_source` returns the whole C file.
"""

from __future__ import annotations

import json
import re

import tvm

from .pipeline import MODEL_ATTR

MODEL_TAG = "DSA-KERNEL-MODEL"
_MODEL_RE = re.compile(r"/\* " + MODEL_TAG + r" (\{.*?\}) \*/")

RUNTIME = r"""
// ---- DSA runtime for host emulation (tvm_fusion_ext.target_dsa) ----
// dsa_mme_gemm_f32: one matrix-unit (MME) instruction, C[m, n] += A[m, k] * B[k, n] on LB tiles.
// (Declared above by TVM's codegen for the call_extern; defined here with the same signature.)
TVM_DLL int32_t dsa_mme_gemm_f32(void* c_, void* a_, void* b_, int32_t ldc, int32_t lda,
                                 int32_t ldb, int32_t m, int32_t n, int32_t k) {
  float* c = (float*)c_;
  const float* a = (const float*)a_;
  const float* b = (const float*)b_;
  for (int32_t i = 0; i < m; ++i)
    for (int32_t r = 0; r < k; ++r) {
      const float av = a[i * lda + r];
      for (int32_t j = 0; j < n; ++j) c[i * ldc + j] += av * b[r * ldb + j];
    }
  return 0;
}
"""

_FFI_PREFIX = "__tvm_ffi_"
_ORIGINAL = tvm.get_global_func("target.build.c")


@tvm.register_global_func("target.build.c", override=True)
def _build_c(mod: tvm.IRModule, target: tvm.target.Target):
    if "dsa" not in list(target.keys):
        return _ORIGINAL(mod, target)
    source = _ORIGINAL(mod, target).inspect_source()
    models = []
    for _, func in mod.functions_items():
        attrs = func.attrs if func.attrs is not None else {}
        if MODEL_ATTR in attrs:
            model = json.loads(str(attrs[MODEL_ATTR]))
            symbol = str(attrs.get("global_symbol", model["name"]))
            model["name"] = symbol.removeprefix(_FFI_PREFIX)
            models.append(model)
    body = source
    if "dsa_mme_gemm_f32(" in source:
        body += RUNTIME
    body += "\n" + "".join(f"/* {MODEL_TAG} {json.dumps(m, sort_keys=True)} */\n" for m in models)
    names = [gv.name_hint for gv in mod.get_global_vars()]
    return tvm.get_global_func("runtime.CSourceModuleCreate")(body, "c", names, [])


def dump_source(executable) -> str:
    """The generated C source of a DSA executable (kernels, prelude and kernel models)."""
    sources = [m.inspect_source() for m in _modules(executable) if m.kind == "c"]
    if not sources:
        raise ValueError("no C source in this executable: was it compiled for a dsa/* target?")
    return "\n".join(sources)


def kernel_models(executable) -> dict[str, dict]:
    """Kernel models embedded by :func:`_build_c`, keyed by kernel symbol."""
    return {m["name"]: m for m in (json.loads(t) for t in _MODEL_RE.findall(dump_source(executable)))}


def _modules(executable):
    root = executable.mod if hasattr(executable, "mod") else executable
    stack, out = [root], []
    while stack:
        module = stack.pop()
        out.append(module)
        stack.extend(module.imports)
    return out
