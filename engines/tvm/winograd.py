"""Winograd F(4x4, 3x3) convolutions for `engines.tvm` (TVM's own TOPI algorithm, with the
weight transform done once at compile time).

A 3x3 stride-1 convolution computed directly costs 9 multiply-adds per output and input
channel; Winograd F(4x4, 3x3) computes each 4x4 output tile from a 6x6 input tile with 36, a
2.25x cut (4x for the multiplications alone), at the price of input and output transforms
and rounding differences of about 1e-6 relative. TOPI's `conv2d_winograd_nhwc` transforms the
weights inside the kernel on every call (its pre-transformed form is a removed legacy path),
which for small feature maps costs more than the convolution itself, so this module splits
the weight transform into its own operator, which `FoldConstant` evaluates once on the
constant weights, and writes the rest as TOPI does (its data-pack and inverse blocks carry
the schedule rules MetaSchedule's CPU rules expect: `conv2d_nhwc_winograd_data_pack`,
`conv2d_nhwc_winograd_inverse`).

Used for NHWC/OHWI convolutions with constant 3x3 weights, stride 1, no dilation, one group;
every other convolution keeps TVM's direct legalization.
"""

from __future__ import annotations

TILE = 4  # F(4x4, 3x3): a 6x6 input tile per 4x4 output tile


def weight_transform(weight, tile: int = TILE):
    """OHWI weights -> the Winograd domain, [alpha, alpha, CO, CI] (G w G^T per channel pair)."""
    from tvm import te
    from tvm.topi.nn.winograd_util import winograd_transform_matrices
    from tvm.topi.utils import get_const_tuple

    out_channels, kh, kw, in_channels = get_const_tuple(weight.shape)
    alpha = tile + kh - 1
    _, _, g = winograd_transform_matrices(int(tile), int(kh), str(weight.dtype))
    r_kh = te.reduce_axis((0, kh), name="r_kh")
    r_kw = te.reduce_axis((0, kw), name="r_kw")
    return te.compute(
        (alpha, alpha, out_channels, in_channels),
        lambda eps, nu, co, ci: te.sum(weight[co, r_kh, r_kw, ci] * g[eps, r_kh] * g[nu, r_kw], axis=[r_kh, r_kw]),
        name="kernel_pack",
    )


def conv2d(data, kernel_pack, padding: list[int], out_dtype: str, tile: int = TILE):
    """NHWC convolution with Winograd-domain weights (TOPI's `_conv2d_winograd_nhwc_impl`, pre-transformed)."""
    from tvm import te
    from tvm.topi.nn.pad import pad
    from tvm.topi.nn.utils import get_pad_tuple
    from tvm.topi.nn.winograd_util import winograd_transform_matrices
    from tvm.topi.utils import get_const_tuple

    batch, height, width, in_channels = get_const_tuple(data.shape)
    alpha, _, out_channels, _ = get_const_tuple(kernel_pack.shape)
    m = tile
    r = alpha - m + 1
    pad_t, pad_l, pad_b, pad_r = get_pad_tuple(padding, (r, r))
    a, b, _ = winograd_transform_matrices(int(m), int(r), str(out_dtype))
    out_h = height + pad_t + pad_b - r + 1
    out_w = width + pad_l + pad_r - r + 1
    n_h, n_w = (out_h + m - 1) // m, (out_w + m - 1) // m
    tiles = batch * n_h * n_w
    extra_h = (n_h - 1) * m + alpha - (height + pad_t + pad_b)
    extra_w = (n_w - 1) * m + alpha - (width + pad_l + pad_r)
    data_pad = pad(
        data,
        (0, pad_t, pad_l, 0),
        (0, pad_b + extra_h, pad_r + extra_w, 0),
        name="data_pad",
        attrs={"schedule_rule": "None"},
    )
    input_tile = te.compute(
        (alpha, alpha, tiles, in_channels),
        lambda eps, nu, p, ci: data_pad[p // (n_h * n_w), ((p // n_w) % n_h) * m + eps, (p % n_w) * m + nu, ci],
        name="input_tile",
        attrs={"schedule_rule": "None"},
    )
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    data_pack = te.compute(
        (alpha, alpha, tiles, in_channels),
        lambda eps, nu, p, ci: te.sum(input_tile[r_a, r_b, p, ci] * b[r_a, eps] * b[r_b, nu], axis=[r_a, r_b]),
        name="data_pack",
        attrs={
            "auto_scheduler_simplify_const_tensor_indices": ["eps", "nu", "r_a", "r_b"],
            "schedule_rule": "conv2d_nhwc_winograd_data_pack",
        },
    )
    ci = te.reduce_axis((0, in_channels), name="ci")
    bgemm = te.compute(
        (alpha, alpha, tiles, out_channels),
        lambda eps, nu, p, co: te.sum(data_pack[eps, nu, p, ci] * kernel_pack[eps, nu, co, ci], axis=[ci]),
        name="bgemm",
        attrs={"layout_free_placeholders": [kernel_pack], "meta_schedule.write_cache_level": [2]},
    )
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    inverse = te.compute(
        (m, m, tiles, out_channels),
        lambda vh, vw, p, co: te.sum(bgemm[r_a, r_b, p, co] * a[r_a, vh] * a[r_b, vw], axis=[r_a, r_b]),
        name="inverse",
        attrs={
            "auto_scheduler_simplify_const_tensor_indices": ["vh", "vw", "r_a", "r_b"],
            "schedule_rule": "conv2d_nhwc_winograd_inverse",
        },
    )
    return te.compute(
        (batch, out_h, out_w, out_channels),
        lambda n, h, w, co: inverse[h % m, w % m, n * n_h * n_w + (h // m) * n_w + (w // m), co],
        name="conv2d_winograd",
    )


def applies(call) -> bool:
    """Whether the `relax.nn.conv2d` call is one this module computes."""
    from tvm.ir.expr import Constant

    attrs, weight = call.attrs, call.args[1]
    if not isinstance(weight, Constant):  # weights the model computes at run time: no fold
        return False
    _, kh, kw, _ = weight.value.shape
    return (
        (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NHWC", "OHWI", "NHWC")
        and int(attrs.groups) == 1
        and [int(s) for s in attrs.strides] == [1, 1]
        and [int(d) for d in attrs.dilation] == [1, 1]
        and (kh, kw) == (3, 3)
    )


def legalize_conv2d(bb, call):
    """`relax.nn.conv2d` -> Winograd where it applies, TVM's direct convolution elsewhere."""
    import tvm

    if not applies(call):
        return tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")(bb, call)
    out_dtype = str(call.attrs.out_dtype) or str(call.args[0].struct_info.dtype)
    packed = bb.emit(bb.call_te(weight_transform, call.args[1], primfunc_name_hint="winograd_weight"))
    return bb.call_te(
        conv2d,
        call.args[0],
        packed,
        [int(p) for p in call.attrs.padding],
        out_dtype,
        primfunc_name_hint="conv2d_winograd",
    )
