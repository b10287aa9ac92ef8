"""A minimal Gluon TMA kernel for CPU codegen tests: TMA-load one [1, BLOCK] row box into shared
memory on an mbarrier, scale it in registers, TMA-store it back."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma


@gluon.jit
def tma_scale_row_kernel(x_desc, y_desc, scale, num_warps: gl.constexpr):
    BLOCK: gl.constexpr = x_desc.block_type.shape[1]
    row = gl.program_id(0)
    smem = gl.allocate_shared_memory(x_desc.dtype, x_desc.block_type.shape, x_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, x_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(x_desc, [row, 0], bar, smem)
    mbarrier.wait(bar, 0)
    L: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [1, num_warps], [1, 0])
    x = smem.load(L).to(gl.float32)
    smem.store((x * scale).to(x_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(y_desc, [row, 0], smem)
    tma.store_wait(0)
    mbarrier.invalidate(bar)


def tma_signature(block: int):
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
    d = f"tensordesc<bf16[1, {block}],{layout!r}>"
    return {"x_desc": d, "y_desc": d, "scale": "fp32", "num_warps": "constexpr"}
