"""``tvm-fusion compile``: a model through one fusion strategy into one shared library.

    tvm-fusion compile model.onnx --target llvm --fusion apollo -o model.so
    tvm-fusion compile resnet18 --model-arg image=64 --target dsa/stcp920 --fusion stock -o r18.so
    tvm-fusion compile dyn.onnx --input-shapes "x:[1,3,224,224]" --target llvm --fusion stock -o m.so
    tvm-fusion compile m.onnx --target llvm --fusion stock --tuning-records tune_dir -o m.so
    tvm-fusion compile bert_base --target '{"kind":"cuda","arch":"sm_90"}' --fusion apollo -o bert.so

MODEL is an ``.onnx`` file, a ``torch.export.save`` file or a zoo name (as for ``compare``). The
library runs with ``tvm.runtime.load_module`` + ``relax.VirtualMachine`` (or ``tvm-fusion run``);
the sidecar ``<library>.json`` beside it names the inputs, target, fusion and policy.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from ..pipelines import POLICIES
from .options import (
    add_cost_check_argument,
    add_cuda_graph_argument,
    add_input_shapes_argument,
    add_model_arguments,
    cuda_graph_scope,
)

HELP = "compile a model (.onnx, saved ExportedProgram or zoo name) through one fusion strategy to a .so"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("compile", help=HELP, description=HELP)
    add_model_arguments(parser)
    parser.add_argument("--target", required=True,
                        help='target string or JSON: llvm, dsa/stcp920, \'{"kind":"llvm","num-cores":2}\', '
                             '\'{"kind":"cuda","arch":"sm_90"}\'')
    parser.add_argument("--fusion", required=True, help="fusion strategy (tvm_fusion_ext.fusion_names())")
    parser.add_argument("--policy", choices=POLICIES, default=None,
                        help="scheduling policy (default: tuned with --tuning-records, else untuned)")
    parser.add_argument("--tuning-records", metavar="DIR",
                        help="the work directory of tvm-fusion tune; its records schedule the kernels")
    add_input_shapes_argument(parser)
    add_cost_check_argument(parser)
    add_cuda_graph_argument(parser)
    parser.add_argument("--dump-ir", metavar="DIR",
                        help="write the module after each pipeline phase (NN_<phase>.py) to DIR")
    parser.add_argument("-o", "--output", required=True, help="shared library to write (e.g. model.so)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..driver import artifacts, evaluation
    from ..pipelines import get_strategy

    # Cheap checks first: a typo should not wait for the model to load.
    get_strategy(args.fusion)
    target = evaluation.parse_target(args.target)
    artifacts.check_target_buildable(target)
    graphs = cuda_graph_scope(args.cuda_graph, target)
    policy = args.policy or ("tuned" if args.tuning_records else "untuned")
    if (policy == "tuned") != bool(args.tuning_records):
        raise ValueError("--policy tuned and --tuning-records DIR go together")
    shapes = artifacts.parse_input_shapes(args.input_shapes)
    workload = evaluation.load_workload(args.model, args.model_arg, args.importer, input_shapes=shapes)
    database = None
    if policy == "tuned":
        from ..tuning import open_records, tuning_target

        target = tuning_target(target)
        database = _open_records(open_records, args.tuning_records, target)
        if database is None:
            policy = "untuned"
    start = time.perf_counter()
    with graphs:
        executable = artifacts.compile_model(workload.mod, args.fusion, target, policy, database, args.dump_ir,
                                             cost_check=args.cost_check)
    compile_s = time.perf_counter() - start
    artifact = artifacts.Artifact(workload.name, artifacts.input_specs(workload.mod), str(target),
                                  args.fusion, policy)
    sidecar = artifacts.save_artifact(executable, args.output, artifact)
    print(f"compiled {workload.name} ({workload.importer} import) with {args.fusion}, policy {policy}, "
          f"in {compile_s:.1f} s; inputs {artifact.describe_inputs()}")
    print(f"wrote {args.output} and {sidecar}" + (f"; IR after each phase in {args.dump_ir}" if args.dump_ir else ""))
    return 0


def _open_records(open_records, work_dir: str, target):
    """``open_records`` with its warning (a missing or corrupt database) printed as one line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        database = open_records(work_dir, target)
    for warning in caught:
        print(f"tvm-fusion compile: warning: {warning.message}", file=sys.stderr)
    return database
