"""What the graph scheduler hands the kernel generator for one sub-graph (sections 3.3-3.4, 4).

:class:`SubgraphPlan` carries one sub-graph's BestSplit (Eq. (1): the dimension and the number of
instances, Fig. 6), the binding of its instances to cores (Algorithm 4) and the output scope
Algorithm 4 inferred, plus Fig. 15's switches (:class:`KernelOptions`). The ``graphturbo``
strategies store the plans of a module as its attribute :data:`PLANS_ATTR` (grouped function name ->
JSON); the DSA kernel generator (:mod:`tvm_fusion_ext.target_dsa.instance_schedule`, staging
by :mod:`tvm_fusion_ext.target_dsa.instance_staging`) reads them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

PLANS_ATTR = "graphturbo.plans"


@dataclass(frozen=True)
class KernelOptions:
    """Fig. 15's switches (section 5.3).

    ``stitch``: layer outputs of a sub-graph stay in LB (buffer stitching, section 4.2; off: they
    go to GB, "outputs kept in LLB"); ``instances``: the sub-graph runs as the instances of its
    BestSplit (section 3.3; off: only its core binding, or the kernel generator's tiling one image
    at a time, splits it); ``instruction_scheduling``:
    promotions of the next piece overlap this piece's layers (section 4.4, Fig. 13).
    """

    stitch: bool = True
    instances: bool = True
    instruction_scheduling: bool = True


# Fig. 15's four bars, from "outputs in GB" to every optimisation on.
VARIANTS: dict[str, KernelOptions] = {
    "gb": KernelOptions(stitch=False, instances=False, instruction_scheduling=False),
    "lb": KernelOptions(stitch=True, instances=False, instruction_scheduling=False),
    "instances": KernelOptions(stitch=True, instances=True, instruction_scheduling=False),
    "full": KernelOptions(),
}


@dataclass(frozen=True)
class SubgraphPlan:
    """One sub-graph's plan: split ``dim`` of its output (of ``output_shape``) into ``instances``
    (BestSplit), bind each instance to ``binding`` cores per dimension (Algorithm 4), and the
    ``scope`` Algorithm 4 gave its output (``LB``, or ``GB`` after a binding mismatch).
    ``tensor_scopes`` gives, for every sub-graph output inside the kernel (a chain's sub-graphs
    but the last, in program order), the position of the op producing it among the kernel's ops,
    its shape and its Algorithm 4 scope: the kernel generator keeps an ``LB`` one in the
    producing core's LB where its consumer runs in the same tile, and exchanges a ``GB`` one
    through GB (section 3.5's copy and redistribution)."""

    dim: int
    instances: int
    binding: tuple[int, ...]
    output_shape: tuple[int, ...]
    scope: str = "LB"
    options: KernelOptions = field(default_factory=KernelOptions)
    tensor_scopes: tuple[tuple[int, tuple[int, ...], str], ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SubgraphPlan:
        data = json.loads(text)
        data["options"] = KernelOptions(**data["options"])
        data["binding"] = tuple(data["binding"])
        data["output_shape"] = tuple(data["output_shape"])
        data["tensor_scopes"] = tuple((position, tuple(shape), scope)
                                      for position, shape, scope in data.get("tensor_scopes", ()))
        return cls(**data)
