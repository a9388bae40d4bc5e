"""FP8 training recipes: what each one casts, at what HBM cost, and which GEMMs stay in 16-bit.

A recipe (`train.fp8_recipe`) is a way of scaling the tensors of a linear layer to FP8:

* **tensorwise** (torchao `Float8LinearRecipeName.TENSORWISE`, Transformer Engine's current scaling): one
  dynamic scale per tensor from its amax, all three GEMMs of the layer in FP8 on cuBLAS.
* **rowwise** (torchao `ROWWISE`): one scale per row, cast along the other dimension a second time for the
  backward GEMMs. The backward GEMMs run with slow accumulation, which the row-wise CUTLASS kernel does so
  slowly that torchao runs the tensorwise cuBLAS kernel and applies the row scales to the output in a
  separate pass (torchao/float8/float8_ops.py `addmm_float8_unwrapped` @710f52ba).
* **rowwise_gw_hp** (torchao `ROWWISE_WITH_GW_HP`): row-wise input and output GEMMs; the weight-gradient
  GEMM stays in bf16, so its operands need no FP8 copies.
* **delayed** (Transformer Engine `DelayedScaling`, torchao's retired delayed recipe): the scale comes from
  an amax history, so the cast needs no amax pass of its own; TE's fused cast-transpose writes both layouts
  in one read and records the amax for the next step (Micikevicius et al. 2022, "FP8 Formats for Deep
  Learning" §4; TE `fp8_cast_transpose_fused`).
* **mxfp8** (OCP MX, 1x32 blocks with E8M0 scales): Blackwell's block-scaled tensor cores; the cast runs
  once per layout (dim0 and dim1), the scales ride along (1/32 of the data).

Cast traffic per element is torchao's float8 roofline (torchao/testing/training/roofline_utils.py
`get_tensor_memory_traffic_ovhd_s` @710f52ba): bytes read and written by the kernels that produce the FP8
copies of a linear's input and output gradient (`act`) and of its weight (`weight`), before the GEMMs read
them. torchao's optional fusion of the first read into the producing op (`enable_fusion_modeling`) is not
applied: its own docstring says the fusion "is not always true in practice". The GEMMs' own reads are in
the GEMM roofline, not here.
"""
from __future__ import annotations

from dataclasses import dataclass

RECIPES = ("tensorwise", "rowwise", "rowwise_gw_hp", "delayed", "mxfp8")

# every family that runs MX block-scaled FP8 GEMMs natively (NVIDIA Blackwell, sm_100/sm_120)
MX_FAMILIES = frozenset({"blackwell"})


@dataclass(frozen=True)
class Fp8Recipe:
    name: str
    act: float          # cast bytes per element of a linear's input or output gradient
    amax_read: float    # the part of `act` that is a separate amax pass (tensorwise: torch.max(torch.abs(x)))
    weight: float       # cast bytes per weight element, each micro-batch
    wgrad_bf16: bool    # the weight-gradient GEMM runs in bf16
    bwd_rescale: bool   # backward GEMMs write a 16-bit output that a separate pass re-scales (read + write)


# torchao roofline kernels (bf16 = 2 bytes, fp8 = 1 byte), without its optional fusion of the first read
# into the producing op (`enable_fusion_modeling`, default False: "not always true in practice"):
#   tensorwise act:  amax read 2 | read 2, write dim0 1 + dim1 1 = 4           -> 6 (amax 2)
#   tensorwise w:    amax read 2 | fwd cast 2 + 1 | bwd cast 2 + 1             -> 8
#   rowwise act:     read 2, write fp8 dim0 1 + bf16 dim1 2 | read 2, write 1  -> 8 (amax inside the cast)
#   rowwise w:       cast 2 + 1 | transpose 2 + 2 | cast 2 + 1                 -> 10
#   rowwise_gw_hp:   act one row-wise cast 2 + 1 -> 3; w two casts             -> 6
#   mxfp8 (cuBLAS):  two casts, one per layout, 2 + 1 each                      -> 6, w 6
#   delayed (TE):    one fused cast-transpose, read 2, write 1 + 1             -> 4, w 4
_TABLE = {
    "tensorwise": Fp8Recipe("tensorwise", 6.0, 2.0, 8.0, False, False),
    "rowwise": Fp8Recipe("rowwise", 8.0, 0.0, 10.0, False, True),
    "rowwise_gw_hp": Fp8Recipe("rowwise_gw_hp", 3.0, 0.0, 6.0, True, False),
    "delayed": Fp8Recipe("delayed", 4.0, 0.0, 4.0, False, False),
    "mxfp8": Fp8Recipe("mxfp8", 6.0, 0.0, 6.0, False, False),
}

# the rescale pass of a backward GEMM's 16-bit output: read it and write it back
BWD_RESCALE_BYTES_PER_ELEMENT = 2.0 + 2.0


def recipe(name: str) -> Fp8Recipe:
    """The recipe called `name` (one of RECIPES; 'auto' is resolved by `resolve_recipe` first)."""
    return _TABLE[name]


def resolve_recipe(requested: str, family: str) -> tuple[str, str | None]:
    """(recipe timed, note or None). `auto` is tensorwise: torchao's and torchtitan's default
    (`Float8LinearConfig()`) and Transformer Engine's current scaling, which Megatron-Bridge's FP8
    recipes use. MX needs block-scaled tensor cores: elsewhere the plan is timed as tensorwise."""
    if requested in (None, "auto"):
        return "tensorwise", None
    if requested == "mxfp8" and family not in MX_FAMILIES:
        return "tensorwise", ("train.fp8_recipe mxfp8 needs MX block-scaled tensor cores (NVIDIA Blackwell); "
                              "this GPU has none, so the plan is timed with tensorwise scaling.")
    return requested, None


def cast_bytes(r: Fp8Recipe, act_elements: float, recast_elements: float, weight_elements: float,
               amax_saved: bool) -> float:
    """HBM bytes of one micro-batch's FP8 casts: `act_elements` inputs and output gradients of the FP8
    linears, `recast_elements` inputs cast again by recomputed linears, `weight_elements` weights.
    `amax_saved`: the recomputation keeps the forward's amax (torchtitan's per-op policy saves the
    outputs of `aten.abs` and `aten.max`, which is how tensorwise computes it), so a recomputed cast
    skips its amax pass."""
    per_recast = r.act - (r.amax_read if amax_saved else 0.0)
    return r.act * act_elements + per_recast * recast_elements + r.weight * weight_elements
