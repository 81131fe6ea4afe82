"""Arguments shared by the subcommands that load a model: the model itself, ``--model-arg``,
``--import``, ``--input-shapes``, ``--no-cost-check`` and ``--cuda-graph``."""

from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add MODEL (positional, or as ``--model MODEL``), ``--model-arg`` and ``--import``.

    Every subcommand hands them to :func:`tvm_fusion_ext.driver.evaluation.load_workload` unchanged, so a
    model means the same thing to ``compare``, ``compile``, ``tune`` and ``explain``, and each
    takes it either way (:func:`resolve_model`, called by :func:`tvm_fusion_ext.cli.main`).
    """
    model_help = "zoo model name, an .onnx file, or a torch.export.save file"
    parser.add_argument("model", nargs="?", metavar="MODEL", help=model_help)
    parser.add_argument("--model", dest="model_option", metavar="MODEL", help="the same as MODEL")
    parser.set_defaults(model_error=parser.error)
    parser.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="zoo model argument (repeatable), e.g. layers=2 seq=128 batch=8 image=112")
    parser.add_argument("--import", dest="importer", choices=("torch", "onnx"), default=None,
                        help="import path for zoo models (default torch; .onnx files use onnx; give "
                             "the same one to tune and compile so tuning records match)")


def resolve_model(args: argparse.Namespace) -> None:
    """Set ``args.model`` from MODEL or ``--model``; exit with a usage error when neither or two
    different ones are given."""
    if args.model and args.model_option and args.model != args.model_option:
        args.model_error(f"two models given: {args.model} and --model {args.model_option}")
    args.model = args.model or args.model_option
    if not args.model:
        args.model_error("a model is required: MODEL or --model MODEL")


def add_input_shapes_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--input-shapes NAME:[D,...]`` (tvmc's syntax): static shapes for a model file's
    dynamic inputs, read by :func:`tvm_fusion_ext.driver.artifacts.parse_input_shapes`."""
    parser.add_argument("--input-shapes", nargs="+", action="extend", default=[], metavar="NAME:[D,...]",
                        help="static shapes for a model file's dynamic inputs, e.g. x:[1,3,224,224]")


def add_cost_check_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--no-cost-check`` (``args.cost_check``): the strategies' fusion decisions without the
    profitability check of :mod:`tvm_fusion_ext.cost`, as their papers wrote them (ablations)."""
    parser.add_argument("--no-cost-check", dest="cost_check", action="store_false",
                        help="fuse as the papers decide, without asking the cost model whether a "
                             "fused kernel is predicted slower than its parts (for ablations)")


def add_cuda_graph_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--cuda-graph`` (``args.cuda_graph``), read by :func:`cuda_graph_scope`."""
    parser.add_argument("--cuda-graph", action="store_true",
                        help="on a CUDA target, capture each call's kernel launches into CUDA graphs "
                             "that the VM replays (static shapes)")


def cuda_graph_scope(enabled: bool, target):
    """The PassContext of :func:`tvm_fusion_ext.driver.build.cuda_graphs` when ``enabled`` (a
    ``ValueError`` off CUDA targets), else a context that changes nothing."""
    import contextlib

    from ..driver.build import cuda_graphs

    if not enabled:
        return contextlib.nullcontext()
    if "cuda" not in list(target.keys):
        raise ValueError(f"--cuda-graph needs a CUDA target, not {target.kind.name}")
    return cuda_graphs()
