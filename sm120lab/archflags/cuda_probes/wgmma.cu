// Probe: Hopper warpgroup MMA, wgmma.mma_async m64n8k16 f32 += bf16 x bf16 (PTX ISA 9.7.15),
// A from registers (per-warp m16n8k16 A fragment layout), B (8 x 16, K-major) from shared memory
// through a no-swizzle matrix descriptor: two 8x8 core matrices of 8 rows x 16 bytes stored one
// after the other (128 B apart). With N = 8 only one core-matrix row exists along N, so the
// leading- and stride-byte offsets are both set to 128 B (whichever the hardware reads, it is right).
// imm-trans-b = 0 selects K-major B (PTX ISA 9.7.15.5.1.2 "Shared Memory Matrix Layout"); an earlier
// version passed 1 (N-major) and failed its numbers check on an H200 (data/archflags/h200_probes.json).
// Expected SASS on sm_90a: HGMMA.64x8x16.F32.BF16.
extern "C" __global__ void probe_wgmma(const unsigned* a, const unsigned short* b_core, float* d) {
  __shared__ __align__(128) unsigned short sb[8 * 16];
  const int t = threadIdx.x;  // 128 threads = one warpgroup
  if (t < 128) sb[t] = b_core[t];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const unsigned long long addr = (unsigned long long)(unsigned)__cvta_generic_to_shared(sb);
  const unsigned long long desc = ((addr & 0x3FFFF) >> 4) | ((128ull >> 4) << 16) | ((128ull >> 4) << 32);
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %9, 0;\n"
      "wgmma.fence.sync.aligned;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n"
      "wgmma.commit_group.sync.aligned;\n"
      "wgmma.wait_group.sync.aligned 0;\n"
      "}\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a[4 * t]), "r"(a[4 * t + 1]), "r"(a[4 * t + 2]), "r"(a[4 * t + 3]), "l"(desc), "r"(0));
  d[4 * t] = d0; d[4 * t + 1] = d1; d[4 * t + 2] = d2; d[4 * t + 3] = d3;
}
