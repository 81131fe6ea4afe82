"""``tvm-fusion tune``: MetaSchedule over the kernels one fusion strategy makes of a model.

    tvm-fusion tune resnet18 --target llvm --fusion stock --trials 16 --work-dir tune_r18
    tvm-fusion tune model.onnx --target llvm --fusion apollo --trials 32 --work-dir tune_m \\
        --rpc-tracker 10.0.0.2:9190 --rpc-key rasp4
    tvm-fusion compile resnet18 --target llvm --fusion stock --tuning-records tune_r18 -o r18.so
    tvm-fusion tune dyn.onnx --input-shapes "x:[1,3,224,224]" --fusion stock --trials 8 --work-dir t

MODEL is a zoo name, an ``.onnx`` file or a ``torch.export.save`` file (as for ``compare``); a
model file with dynamic inputs needs ``--input-shapes``, the same as ``compile`` is given. The
work directory keeps the JSON database; running again with the same directory resumes. With
``--rpc-tracker``/``--rpc-key`` the candidates are built here and timed on the RPC servers
registered with the tracker under that key (``python -m tvm.exec.rpc_tracker`` on one machine,
``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`` on each board or machine). The
tuning itself lives in :mod:`tvm_fusion_ext.tuning`.
"""

from __future__ import annotations

import argparse

from .options import add_cost_check_argument, add_input_shapes_argument, add_model_arguments

HELP = "tune the kernels of one fusion strategy with MetaSchedule (resumable, optionally over TVM RPC)"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("tune", help=HELP, description=HELP)
    add_model_arguments(parser)
    add_input_shapes_argument(parser)
    add_cost_check_argument(parser)
    parser.add_argument("--target", default="llvm",
                        help='target string or JSON (a bare llvm means this CPU; give "num-cores" in the '
                             'JSON for RPC boards, else this machine\'s thread count is assumed)')
    parser.add_argument("--fusion", default="stock", help="fusion strategy whose kernels are tuned")
    parser.add_argument("--trials", type=int, required=True,
                        help="measured candidates PER KERNEL (the total is about trials x kernels; a "
                             "kernel with a small search space may stop earlier)")
    parser.add_argument("--work-dir", required=True,
                        help="JSON database and logs; an existing one is resumed (kernels that already "
                             "have --trials records are not measured again)")
    parser.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure on RPC servers of this tracker")
    parser.add_argument("--rpc-key", metavar="KEY", help="the key the RPC servers registered with")
    parser.add_argument("--trials-per-iter", type=int, default=None,
                        help="candidates built and measured per search round (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the search")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from .. import tuning
    from ..driver import artifacts, evaluation
    from ..pipelines import get_strategy

    # Cheap checks first: a typo should not wait for the model to load.
    get_strategy(args.fusion)
    if args.trials < 1:
        raise ValueError("--trials must be at least 1")
    if bool(args.rpc_tracker) != bool(args.rpc_key):
        raise ValueError("--rpc-tracker and --rpc-key go together")
    if args.rpc_tracker:
        tuning.parse_tracker(args.rpc_tracker)
    shapes = artifacts.parse_input_shapes(args.input_shapes)
    target = tuning.tuning_target(evaluation.parse_target(args.target), evaluation.configure_threads())
    workload = evaluation.load_workload(args.model, args.model_arg, args.importer, input_shapes=shapes)
    runner = tuning.rpc_runner(args.rpc_tracker, args.rpc_key) if args.rpc_tracker else None
    report = tuning.tune(workload.mod, args.fusion, target, args.trials, args.work_dir, runner=runner,
                         progress=not args.no_progress, seed=args.seed,
                         trials_per_iter=args.trials_per_iter or tuning.TRIALS_PER_ITER,
                         cost_check=args.cost_check)
    print(report.table())
    if report.skipped:
        print(f"not tuned (already scheduled or no design space): {', '.join(report.skipped)}")
    print(report.summary())
    model_args = "".join(f" --model-arg {arg}" for arg in args.model_arg)
    model_args += "".join(f" --input-shapes '{item}'" for item in args.input_shapes)
    model_args += "" if args.cost_check else " --no-cost-check"
    print(f"compile with: tvm-fusion compile {args.model}{model_args} --target '{target}' "
          f"--fusion {args.fusion} --tuning-records {args.work_dir} -o model.so")
    return 0
