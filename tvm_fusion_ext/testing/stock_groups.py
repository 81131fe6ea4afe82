"""Read the grouping TVM's own ``FuseOps`` makes, as a partition of the unfused module's bindings.

Used to check that the partition materialiser (and the Python FuseOps) reproduce stock FuseOps
exactly: feed this partition to :class:`MaterializePartition` on the unfused module and compare with
``relax.transform.FuseOps()`` structurally.

How the groups are recovered: every ``call_tir`` binding is first given a PrimFunc of its own
(``<callee>__b<k>``), so the ``call_tir`` bindings inside each grouped function name their original
bindings. Tuple-get-items fused into a group are recovered from their source inside the group, or,
when FuseOps split a partially used tuple parameter, from the item parameter ``<tuple>_<index>``.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..analysis.graph import DataflowGraph, NodeKind, build_graphs
from ..ir_utils import is_primitive
from ..relax_passes.materialize_partition import Partitioner

_TAG = "__b"


def stock_fuseops_partitioner(mod: tvm.IRModule, func_name: str = "main",
                              fuse_opt_level: int = -1) -> Partitioner:
    """A partitioner returning, for each dataflow block of ``mod[func_name]``, FuseOps' groups."""
    tagged, owners = _tag_callees(mod, func_name)
    fused = relax.transform.FuseOps(fuse_opt_level)(tagged)
    graphs = build_graphs(mod, func_name)
    groups_by_block = {g.block_index: _groups_of_block(fused, g, owners) for g in graphs}

    def _partition(graph: DataflowGraph):
        return groups_by_block.get(graph.block_index, [])

    return _partition


def _tag_callees(mod: tvm.IRModule, func_name: str):
    """Copy of ``mod`` where the k-th call_tir binding calls its own PrimFunc ``<callee>__b<k>``."""
    call_tir_ops = (tvm.ir.Op.get("relax.call_tir"), tvm.ir.Op.get("relax.call_tir_inplace"))
    owners: dict[str, tuple[int, int]] = {}
    builder = relax.BlockBuilder(mod)
    counter = 0

    func = mod[func_name]
    new_blocks = []
    for block_index, block in enumerate(func.body.blocks):
        bindings = []
        for i, binding in enumerate(block.bindings):
            value = binding.value
            if isinstance(value, relax.Call) and any(value.op.same_as(op) for op in call_tir_ops):
                tag = f"{value.args[0].name_hint}{_TAG}{counter}"
                counter += 1
                # The attribute keeps the copies apart (add_func reuses structurally equal ones).
                gvar = builder.add_func(mod[value.args[0]].with_attr("tvm_fusion_ext.copy", tag), tag)
                owners[tag] = (block_index, i)
                value = builder.normalize(
                    relax.Call(value.op, [gvar, *value.args[1:]], value.attrs, value.ty_args))
                binding = relax.VarBinding(binding.var, value)
            bindings.append(binding)
        block_type = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
        new_blocks.append(block_type(bindings))
    new_body = relax.SeqExpr(new_blocks, func.body.body)
    new_mod = tvm.IRModule(dict(builder.get().functions_items()), attrs=mod.attrs)
    new_mod[func_name] = relax.Function(func.params, new_body, func.ret_ty, func.is_pure, func.attrs)
    return new_mod, owners


def _groups_of_block(fused: tvm.IRModule, graph: DataflowGraph, owners) -> list[list[int]]:
    groups = []
    for gvar, func in fused.functions_items():
        if not isinstance(func, relax.Function) or not is_primitive(func):
            continue
        members = _members(func, graph, owners)
        if members:
            groups.append(sorted(members))
    return groups


def _members(func: relax.Function, graph: DataflowGraph, owners) -> set[int]:
    """Original binding ids of one grouped function that belong to ``graph``'s block."""
    members: set[int] = set()
    inner_to_original: dict = {}
    for binding in func.body.blocks[0].bindings:
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.args[0], tvm.ir.GlobalVar):
            owner = owners.get(value.args[0].name_hint)
            if owner is not None and owner[0] == graph.block_index:
                members.add(owner[1])
                inner_to_original[binding.var] = owner[1]
        elif isinstance(value, relax.TupleGetItem):
            source = inner_to_original.get(value.tuple_value)
            if source is None and isinstance(value.tuple_value, relax.Var):
                source = _node_named(graph, value.tuple_value.name)
            if source is not None:
                original = _get_item_of(graph, source, value.index)
                if original is not None:
                    members.add(original)
                    inner_to_original[binding.var] = original
    if not members:
        return members
    for param in func.params:  # tuple-get-items FuseOps turned into item parameters
        base, _, index = param.name.rpartition("_")
        source = _node_named(graph, base) if index.isdigit() else None
        if source is not None and isinstance(graph.nodes[source].shapes, tuple):
            original = _get_item_of(graph, source, int(index))
            if original is not None and not isinstance(param.ty, relax.TupleType):
                members.add(original)
    return members


def _node_named(graph: DataflowGraph, name: str) -> int | None:
    matches = [n.index for n in graph.nodes if n.name == name]
    return matches[0] if len(matches) == 1 else None


def _get_item_of(graph: DataflowGraph, source: int, index: int) -> int | None:
    for consumer in graph.nodes[source].outputs:
        node = graph.nodes[consumer]
        if node.kind is NodeKind.TUPLE_GET_ITEM and graph.bindings[consumer].value.index == index:
            return consumer
    return None
