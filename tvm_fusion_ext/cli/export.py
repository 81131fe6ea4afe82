"""``tvm-fusion export``: a zoo model as a model file, plus matching random inputs.

    tvm-fusion export resnet18 --model-arg image=64 --format onnx -o resnet18.onnx --inputs-out in.npz

``--format onnx`` writes what ``torch.onnx.export`` makes of the model (opset
:data:`zoo.frontends.ONNX_OPSET`, static shapes), ``--format torch`` a ``torch.export.save`` file
(``.pt2``) of its ``ExportedProgram``. ``--inputs-out`` writes the model's fixed-seed random example
inputs as an ``.npz`` keyed by the input names ``compile`` gives the model's inputs, so
``tvm-fusion run model.so --inputs in.npz`` takes the file as it is.
"""

from __future__ import annotations

import argparse
import os

HELP = "write a zoo model as an ONNX file or a saved torch.export program (and its inputs as .npz)"
FORMATS = {"onnx": ".onnx", "torch": ".pt2"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("export", help=HELP, description=HELP)
    parser.add_argument("model", help="zoo model name (tvm_fusion_ext.zoo.MODELS)")
    parser.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="zoo model argument (repeatable), e.g. image=64 batch=2")
    parser.add_argument("--format", choices=tuple(FORMATS), default=None,
                        help="onnx or torch (default: from the output's suffix, .onnx or .pt2)")
    parser.add_argument("-o", "--output", required=True, help="model file to write")
    parser.add_argument("--inputs-out", metavar="NPZ", help="also write the example inputs, by input name")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from .. import zoo

    fmt = args.format or next((f for f, suffix in FORMATS.items() if args.output.endswith(suffix)), None)
    if fmt is None:
        raise ValueError(f"{args.output}: give --format onnx|torch (or name the file .onnx / .pt2)")
    for path in (args.output, args.inputs_out):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ValueError(f"{path}: directory {os.path.dirname(os.path.abspath(path))} does not exist")
    model = zoo.load(args.model, zoo.parse_model_args(args.model, args.model_arg), args.seed)
    if fmt == "onnx":
        with open(args.output, "wb") as out:
            out.write(model.onnx_bytes())
        names = model.input_names
    else:
        import torch

        program = model.exported_program()
        torch.export.save(program, args.output)
        names = list(program.graph_signature.user_inputs)
    print(f"wrote {args.output} ({args.model}, {fmt}; inputs "
          + ", ".join(f"{name}: {x.dtype}{list(x.shape)}" for name, x in zip(names, model.numpy_inputs())) + ")")
    if args.inputs_out:
        np.savez(args.inputs_out, **dict(zip(names, model.numpy_inputs())))
        print(f"wrote {args.inputs_out}")
    return 0
