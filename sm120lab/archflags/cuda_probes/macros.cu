// Probe: which architecture macros a target defines. Each defined macro is (1) written into
// out[] at run time (0 when undefined) and (2) emitted as a PTX comment "// SM120LAB_MACRO name=value"
// through inline asm, so the compile alone (no GPU) reports it.
#define SM120LAB_STR2(x) #x
#define SM120LAB_STR(x) SM120LAB_STR2(x)

extern "C" __global__ void probe_macros(int* out) {
  if (threadIdx.x != 0) return;
#ifdef __CUDA_ARCH__
  out[0] = __CUDA_ARCH__;
  asm volatile("// SM120LAB_MACRO __CUDA_ARCH__=" SM120LAB_STR(__CUDA_ARCH__));
#else
  out[0] = 0;
#endif
#ifdef __CUDA_ARCH_SPECIFIC__
  out[1] = __CUDA_ARCH_SPECIFIC__;
  asm volatile("// SM120LAB_MACRO __CUDA_ARCH_SPECIFIC__=" SM120LAB_STR(__CUDA_ARCH_SPECIFIC__));
#else
  out[1] = 0;
#endif
#ifdef __CUDA_ARCH_FAMILY_SPECIFIC__
  out[2] = __CUDA_ARCH_FAMILY_SPECIFIC__;
  asm volatile("// SM120LAB_MACRO __CUDA_ARCH_FAMILY_SPECIFIC__=" SM120LAB_STR(__CUDA_ARCH_FAMILY_SPECIFIC__));
#else
  out[2] = 0;
#endif
#ifdef __CUDA_ARCH_FEAT_SM120_ALL
  out[3] = 1;
  asm volatile("// SM120LAB_MACRO __CUDA_ARCH_FEAT_SM120_ALL=1");
#else
  out[3] = 0;
#endif
#ifdef __CUDA_ARCH_FEAT_SM121_ALL
  out[4] = 1;
  asm volatile("// SM120LAB_MACRO __CUDA_ARCH_FEAT_SM121_ALL=1");
#else
  out[4] = 0;
#endif
#ifdef __CUDA_ARCH_FEAT_SM100_ALL
  out[5] = 1;
  asm volatile("// SM120LAB_MACRO __CUDA_ARCH_FEAT_SM100_ALL=1");
#else
  out[5] = 0;
#endif
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
  out[6] = 1;
  asm volatile("// SM120LAB_MACRO __CUDA_ARCH_FEAT_SM90_ALL=1");
#else
  out[6] = 0;
#endif
}
