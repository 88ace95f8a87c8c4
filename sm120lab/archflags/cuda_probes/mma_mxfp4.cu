// Probe: SM120 block-scaled FP4 MMA, MXFP4 flavour (PTX ISA 9.7.14 "mma", .kind::mxf4nvf4,
// .block_scale .scale_vec::2X, E2M1 operands, UE8M0 scale factors, one per 32 K-elements).
// One warp computes one m16n8k64 tile. Operands arrive as per-lane fragment registers so the
// numbers can be checked against sm120lab.kernels.mma_block_scale_emulation (same layouts).
// Expected SASS where accepted: OMMA.SF.16864.F32.E2M1.E2M1.E8. Unverified on SM120 hardware.
extern "C" __global__ void probe_mma_mxfp4(const unsigned* a, const unsigned* b, const float* c,
                                           const unsigned* sfa, const unsigned* sfb, float* d) {
  const int l = threadIdx.x & 31;
  float d0, d1, d2, d3;
  const unsigned short byte_id = 0, thread_id = 0;
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X"
      ".f32.e2m1.e2m1.f32.ue8m0 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13}, %14, {%15,%16}, %17, {%18,%19};\n"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(a[4 * l]), "r"(a[4 * l + 1]), "r"(a[4 * l + 2]), "r"(a[4 * l + 3]),
        "r"(b[2 * l]), "r"(b[2 * l + 1]),
        "f"(c[4 * l]), "f"(c[4 * l + 1]), "f"(c[4 * l + 2]), "f"(c[4 * l + 3]),
        "r"(sfa[l]), "h"(byte_id), "h"(thread_id), "r"(sfb[l]), "h"(byte_id), "h"(thread_id));
  d[4 * l] = d0; d[4 * l + 1] = d1; d[4 * l + 2] = d2; d[4 * l + 3] = d3;
}
