"""MetaSchedule pieces shared by every tuning entry point of the package."""

from __future__ import annotations

import os
import tempfile

import tvm


def in_process_builder(artifact: str = "candidate.tar"):
    """A MetaSchedule builder that compiles candidates in this process.

    MetaSchedule's default ``LocalBuilder`` starts a popen pool whose workers each import
    ``tvm.s_tir.tensor_intrin`` (about 23 s on a 2-core machine), so every candidate times out
    (shared/tvm027/NOTES.md section 6.1). Building in-process avoids that start-up entirely.
    """
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):
            results = []
            for build_input in build_inputs:
                try:
                    executable = tvm.compile(build_input.mod, target=build_input.target)
                    path = os.path.join(tempfile.mkdtemp(prefix="tvm_fusion_ms_"), artifact)
                    executable.export_library(path)
                    results.append(BuilderResult(path, None))
                except Exception as err:  # noqa: BLE001 - a failed candidate must not stop tuning
                    results.append(BuilderResult(None, str(err)))
            return results

    return InProcessBuilder()
