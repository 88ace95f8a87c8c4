// Probe: programmatic dependent launch (PDL / GDC), griddepcontrol.wait and
// griddepcontrol.launch_dependents (PTX ISA 9.7.13 "griddepcontrol", sm_90+).
// Without a PDL launch attribute both are no-ops at run time, so the kernel must still compute
// out[i] = 2 * in[i] + 1. Expected SASS: ACQBULK (wait) and PREEXIT (launch_dependents).
extern "C" __global__ void probe_griddepcontrol(const float* in, float* out, int n) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i] + 1.0f;
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
