// probe_clock.cuh: now(), the GPU's global timer in nanoseconds, for the
// standalone probes in tools/probes/ that stamp phases of a CTA's run
// (cluster_occupancy.cu, dsmem_probe.cu, tma_probe.cu).
#pragma once

#include <cstdint>

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
