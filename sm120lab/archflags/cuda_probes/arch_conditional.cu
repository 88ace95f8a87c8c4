// Probe: the CUTLASS pattern. The real instruction sits behind the architecture-feature macros
// (CUTLASS 4.x: CUTLASS_ARCH_MMA_SM120A_ENABLED from __CUDA_ARCH_FEAT_SM120_ALL, SM120F from
// __CUDA_ARCH_FAMILY_SPECIFIC__ == 1200); any other target compiles the fallback: a printf and a
// trap. So a plain compute_120 build compiles cleanly and fails only at run time, with the message
// the seed report saw. Evidence: OMMA.SF in SASS when the MMA is compiled in, else a CALL to vprintf.
#if defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) || \
    (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && (__CUDA_ARCH_FAMILY_SPECIFIC__ == 1200 || __CUDA_ARCH_FAMILY_SPECIFIC__ == 1210))
#define SM120LAB_MMA_ENABLED 1
#endif

extern "C" __global__ void probe_arch_conditional(const unsigned* a, const unsigned* b, const float* c,
                                                  const unsigned* sfa, const unsigned* sfb, float* d) {
  const int l = threadIdx.x & 31;
#if defined(SM120LAB_MMA_ENABLED)
  float d0, d1, d2, d3;
  const unsigned short byte_id = 0, thread_id = 0;
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
      ".f32.e2m1.e2m1.f32.ue4m3 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13}, %14, {%15,%16}, %17, {%18,%19};\n"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(a[4 * l]), "r"(a[4 * l + 1]), "r"(a[4 * l + 2]), "r"(a[4 * l + 3]),
        "r"(b[2 * l]), "r"(b[2 * l + 1]),
        "f"(c[4 * l]), "f"(c[4 * l + 1]), "f"(c[4 * l + 2]), "f"(c[4 * l + 3]),
        "r"(sfa[l]), "h"(byte_id), "h"(thread_id), "r"(sfb[l]), "h"(byte_id), "h"(thread_id));
  d[4 * l] = d0; d[4 * l + 1] = d1; d[4 * l + 2] = d2; d[4 * l + 3] = d3;
#else
  if (l == 0) printf("ERROR : Arch conditional MMA instruction used without targeting appropriate compute capability. Aborting.\n");
  asm volatile("trap;");
#endif
}
