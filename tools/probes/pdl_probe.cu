// pdl_probe.cu: what programmatic dependent launch (PDL) gains the decode
// kernel's warpgroup form (kernels/cuda/gemv_wg.cuh) when its runs follow other
// kernels, as in an engine's decode step captured into a CUDA graph.
//
// Each plan is timed as a graph of 20 consecutive steps, weights rotated
// over 8 copies (more than L2), the median of 7 replays behind a large
// copy, µs per step:
//
//   alone     20 products back to back (what `sfsurgery bench` times)
//   alone+pdl the same, each launched with the programmatic attribute: its
//             producer warp streams weights while the product before it
//             finishes, its consumers wait (griddepcontrol.wait) before X
//   after     20 × (a small kernel that writes X, then the product), the
//             writer a plain launch as a norm or rope kernel would be
//   after+pdl the same with the product launched with the attribute
//   writer    the 20 writers alone (after − writer: the product's share)
//   afterT+pdl the writer triggers its dependents at once
//             (griddepcontrol.launch_dependents, as PDL-aware kernels of
//             TensorRT-LLM or llama.cpp do), the product has the attribute
//   dense     cuBLASLt's first heuristic algorithm alone, after the plain
//             writer and after the triggering one: cuBLASLt launches its
//             kernels itself, so if they used PDL the last would be faster
//
// Every product's output (20 rotating Y buffers) is compared bit for bit
// between the plain and the PDL graphs, so a read of X or a write of Y
// that raced the kernel before it would show as a mismatch. Build and run
// from the repository root (sm_90a for wgmma):
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/pdl tools/probes/pdl_probe.cu -lcublasLt && /tmp/pdl
//
// With an argument it answers other questions about the same kernel (see
// main): "alone" the alone column and a hash of every output (two builds
// of gemv_wg.cuh, -DGEMV_WG_CUH=..., compare bit for bit), "windows"
// window sizes at 64 tokens, "groups" token groups beside the planner's
// plans, "clusters" token groups launched as clusters, "pairs" 64-row CTAs
// and the pair sum, "pairwin" a pair's window widths, "win128" 128-row
// CTAs' window widths, "kvtime" k/v's grids, "kvbytes" k/v's bytes per
// CTA summed as a pair, "trace" per-CTA timelines of one launch ("kvtrace"
// of k/v's grids and two pairs), "hy" (and "hyall", "hytrace") the
// hybrid 32-row kernel (kernels/cuda/gemv_hy.cuh through probe_hybrid.cuh) on k/v.
// A head start for the producer before it waits for the activations was
// measured and did not win (docs/kernels.md).
//
// Not part of the product or its tests.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cublasLt.h>

#include "probe_dense.cuh"  // Dense, LT
#include "probe_trace.cuh"  // SFS_GEMV_TRACE, print_trace
#define SFS_GDC_LAUNCH() asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory")
#define SFS_GDC_WAIT() asm volatile("griddepcontrol.wait;\n" ::: "memory")
// GEMV_WG_CUH: the kernel source to probe (another version of it, to compare).
#ifndef GEMV_WG_CUH
#define GEMV_WG_CUH "../../kernels/cuda/gemv_wg.cuh"
#define SFS_PROBE_HYBRID 1  // kernels/cuda/gemv_hy.cuh includes this gemv_wg.cuh
#endif
#include GEMV_WG_CUH
#include "probe_time.cuh"  // CK, Busy, batch_median

#include "probe_wg.cuh"     // wg_t*_s*, wg_kernel
#if SFS_PROBE_HYBRID
#include "probe_hybrid.cuh"  // hy_kernel
#endif

// writex stands for the kernel before a projection (a norm, rope): it
// writes the n bf16 activations, a value that depends on the step.
__global__ void writex(uint16_t* x, size_t n, int step) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = static_cast<uint16_t>(0x3c00 + ((i * 7 + step * 13) & 0x1ff));
}

// writex_trigger is writex that lets the kernel after it launch at once.
__global__ void writex_trigger(uint16_t* x, size_t n, int step) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = static_cast<uint16_t>(0x3c00 + ((i * 7 + step * 13) & 0x1ff));
}

struct Plan {
  const char* name;
  int n, k, m, sc, splits, xwin;  // xwin 0: whole
  bool coop;
  int tiles = 0;  // 8-token tiles per CTA (token groups: grid.z = ceil(m / (8·tiles))); 0: all of m
  int rb = 4;     // row blocks of 32 rows per CTA: 4, or 2 (kernel_wg's RB)
  bool pair = false;  // two slices summed as a pair (kernel_wg's PAIR), clusters of (1, 2, 1)
  bool hy = false;    // probe_hybrid.cuh's kernel instead (rb 1)
};

static int depth(int sc) { return sc == 2 ? 4 : 3; }
static int stage_bytes(int sc) { return 32 * sc * 64 + 2 * sc * 128; }


static const int kRot = 8, kSteps = 20;

int main(int argc, char** argv) {
  // "windows": only the alone column, over plans of 4-chunk stages with
  // one-stage windows (xw = 4) and 2-chunk stages with windows of 8
  // beside the planner's (2-chunk stages, windows of 6) at m = 64, each
  // output compared with its group's first plan.
  const bool windows = argc > 1 && strcmp(argv[1], "windows") == 0;
  // "alone": only the alone column and a hash of every output (FNV-1a),
  // to compare two builds of the kernel bit for bit.
  const bool alone = argc > 1 && strcmp(argv[1], "alone") == 0;
  // "trace": one launch of each plan after a warm one, behind a large
  // copy; per trace point (0 entry, 1 activations staged, 2 first stage
  // landed, 3 loop done, 4 partial sums stored, 5 sum done) the min /
  // median / max over CTAs in µs after the first CTA's entry.
  const bool trace = argc > 1 && (strcmp(argv[1], "trace") == 0 || strcmp(argv[1], "kvtrace") == 0 ||
                                  strcmp(argv[1], "hytrace") == 0);
  const size_t maxPack = 28672ull * 8192;  // bytes of packed values of the largest shape (70B gate_up)
  Busy busy = make_busy(256 << 20);
  std::vector<uint16_t*> pack;
  std::vector<uint32_t*> meta;
  std::vector<uint16_t> host(maxPack / 2);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint16_t>(0x3800 + (i * 2654435761u >> 20) % 0x800);
  for (int r = 0; r < kRot; ++r) {
    uint16_t* p;
    uint32_t* m;
    CK(cudaMalloc(&p, maxPack));
    CK(cudaMalloc(&m, maxPack / 8));
    CK(cudaMemcpy(p, host.data(), maxPack, cudaMemcpyHostToDevice));
    CK(cudaMemset(m, 0x44 + r, maxPack / 8));  // 0x44 … 0x4b: every nibble a valid 2:4 pattern
    pack.push_back(p);
    meta.push_back(m);
  }
  const size_t maxX = 64ull * 28672;
  uint16_t* x;
  CK(cudaMalloc(&x, maxX * 2));
  writex<<<132, 256>>>(x, maxX, 7);  // activations that differ by token and column
  std::vector<float*> ys(kSteps);
  for (auto& y : ys) CK(cudaMalloc(&y, 64ull * 28672 * 4));
  char* w;
  const size_t counters = 4096;
  CK(cudaMalloc(&w, counters * 4 + 64ull * 64 * 28672 * 4));
  const size_t workBytes = counters * 4 + 64ull * 64 * 28672 * 4;
  float* work = reinterpret_cast<float*>(w + counters * 4);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  std::vector<Plan> plans = {
      {"8B k_v m1 sc4 s10", 1024, 4096, 1, 4, 10, 0, false},
      {"8B k_v m16 sc4 s8", 1024, 4096, 16, 4, 8, 0, false},
      {"8B k_v m64 sc4 s16 coop", 1024, 4096, 64, 4, 16, 0, true},
      {"8B k_v m64 sc4 s8", 1024, 4096, 64, 4, 8, 0, false},
      {"8B q_o m1 sc4 s4 xw8", 4096, 4096, 1, 4, 4, 8, false},
      {"8B q_o m16 sc4 s4", 4096, 4096, 16, 4, 4, 0, false},
      {"8B q_o m32 sc4 s4 xw8", 4096, 4096, 32, 4, 4, 8, false},
      {"8B q_o m64 sc2 s4 xw6", 4096, 4096, 64, 2, 4, 6, false},
      {"70B k_v m1 sc4 s16", 1024, 8192, 1, 4, 16, 0, false},
      {"70B k_v m32 sc4 s8 xw8", 1024, 8192, 32, 4, 8, 8, false},
      {"70B k_v m64 sc4 s16 coop", 1024, 8192, 64, 4, 16, 0, true},
      {"8B gate_up m1 sc4 s1 xw8", 14336, 4096, 1, 4, 1, 8, false},
      {"8B down m16 sc4 s4 xw8", 4096, 14336, 16, 4, 4, 8, false},
      {"8B down m64 sc2 s4 xw6", 4096, 14336, 64, 2, 4, 6, false},
      {"70B q_o m64 sc2 s2 xw6", 8192, 8192, 64, 2, 2, 6, false},
  };
  if (alone)
    plans.insert(plans.end(), {
        {"8B gate_up m16 sc4 s1 xw8", 14336, 4096, 16, 4, 1, 8, false},
        {"8B gate_up m32 sc4 s1 xw8", 14336, 4096, 32, 4, 1, 8, false},
        {"8B gate_up m64 sc2 s1 xw6", 14336, 4096, 64, 2, 1, 6, false},
        {"8B down m32 sc4 s4 xw8", 4096, 14336, 32, 4, 4, 8, false},
        {"70B q_o m16 sc4 s2 xw8", 8192, 8192, 16, 4, 2, 8, false},
        {"70B q_o m32 sc4 s2 xw8", 8192, 8192, 32, 4, 2, 8, false},
        {"70B down m64 sc2 s2 xw6", 8192, 28672, 64, 2, 2, 6, false},
        {"70B gate_up m64 sc2 s1 xw6", 28672, 8192, 64, 2, 1, 6, false},
        {"8B q_o m8 sc4 s4", 4096, 4096, 8, 4, 4, 0, false},
        {"8B q_o m16 sc2 s4 xw6", 4096, 4096, 16, 2, 4, 6, false},
        {"70B k_v m16 sc4 s8 xw8", 1024, 8192, 16, 4, 8, 8, false},
        {"8B q_o m64 t4 s2 xw8", 4096, 4096, 64, 4, 2, 8, false, 4},
    });
  // "groups": the alone column for plans that split the tokens over
  // CTAs (grid.z), beside the planner's, each output's largest difference
  // from its group's first plan (relative to the largest |y|).
  const bool groups = argc > 1 && strcmp(argv[1], "groups") == 0;
  if (groups)
    plans = {
        {"8B k_v m64 s16 coop", 1024, 4096, 64, 4, 16, 0, true},
        {"8B k_v m64 t2 s4", 1024, 4096, 64, 4, 4, 0, false, 2},
        {"8B k_v m64 t1 s2", 1024, 4096, 64, 4, 2, 0, false, 1},
        {"8B k_v m64 t4 s8", 1024, 4096, 64, 4, 8, 0, false, 4},
        {"8B k_v m64 t4 s4", 1024, 4096, 64, 4, 4, 0, false, 4},
        {"8B k_v m64 t2 s2", 1024, 4096, 64, 4, 2, 0, false, 2},
        {"8B k_v m32 s8", 1024, 4096, 32, 4, 8, 0, false},
        {"8B k_v m32 t2 s8", 1024, 4096, 32, 4, 8, 0, false, 2},
        {"8B k_v m32 t1 s4", 1024, 4096, 32, 4, 4, 0, false, 1},
        {"8B k_v m16 s8", 1024, 4096, 16, 4, 8, 0, false},
        {"8B k_v m16 t1 s8", 1024, 4096, 16, 4, 8, 0, false, 1},
        {"70B k_v m64 s16 coop", 1024, 8192, 64, 4, 16, 0, true},
        {"70B k_v m64 t2 s4", 1024, 8192, 64, 4, 4, 0, false, 2},
        {"70B k_v m64 t4 s8", 1024, 8192, 64, 4, 8, 8, false, 4},
        {"70B k_v m64 t1 s2", 1024, 8192, 64, 4, 2, 8, false, 1},
        {"70B k_v m32 s8 xw8", 1024, 8192, 32, 4, 8, 8, false},
        {"70B k_v m32 t2 s8", 1024, 8192, 32, 4, 8, 8, false, 2},
        {"70B k_v m32 t1 s4", 1024, 8192, 32, 4, 4, 8, false, 1},
        {"8B q_o m64 s4 xw6", 4096, 4096, 64, 2, 4, 6, false},
        {"8B q_o m64 t2 s1", 4096, 4096, 64, 4, 1, 8, false, 2},
        {"8B q_o m64 t4 s2", 4096, 4096, 64, 4, 2, 8, false, 4},
        {"8B q_o m32 s4 xw8", 4096, 4096, 32, 4, 4, 8, false},
        {"8B q_o m32 t2 s2", 4096, 4096, 32, 4, 2, 8, false, 2},
        {"8B down m64 s4 xw6", 4096, 14336, 64, 2, 4, 6, false},
        {"8B down m64 t4 s2", 4096, 14336, 64, 4, 2, 8, false, 4},
        {"70B q_o m64 s2 xw6", 8192, 8192, 64, 2, 2, 6, false},
        {"70B q_o m64 t4 s1", 8192, 8192, 64, 4, 1, 8, false, 4},
    };
  // "clusters": token-group plans launched plain and with the groups of
  // a (row block, slice) as one cluster (dimensions (1, 1, groups): the
  // same GPC, so one L2 half, starting together), in turn three times,
  // each cluster output compared bit for bit with the plain one.
  const bool clusters = argc > 1 && strcmp(argv[1], "clusters") == 0;
  if (clusters)
    plans = {
        {"70B q_o m64 t4 s1", 8192, 8192, 64, 4, 1, 8, false, 4},
        {"8B down m64 t4 s2", 4096, 14336, 64, 4, 2, 8, false, 4},
        {"8B down m64 t2 s1", 4096, 14336, 64, 4, 1, 8, false, 2},
        {"8B q_o m64 t4 s2", 4096, 4096, 64, 4, 2, 8, false, 4},
        {"8B q_o m64 t2 s1", 4096, 4096, 64, 4, 1, 8, false, 2},
        {"70B down m64 t4 s1", 8192, 28672, 64, 4, 1, 8, false, 4},
        {"70B k_v m64 t4 s8", 1024, 8192, 64, 4, 8, 0, false, 4},
        {"70B k_v m64 t2 s4", 1024, 8192, 64, 4, 4, 0, false, 2},
        {"8B k_v m64 t2 s4", 1024, 4096, 64, 4, 4, 0, false, 2},
        {"70B q_o m32 t2 s1", 8192, 8192, 32, 4, 1, 8, false, 2},
        {"8B down m32 t2 s2", 4096, 14336, 32, 4, 2, 8, false, 2},
        {"70B k_v m32 t2 s8", 1024, 8192, 32, 4, 8, 0, false, 2},
        {"8B q_o m32 t2 s2", 4096, 4096, 32, 4, 2, 8, false, 2},
        {"8B gate_up m64 t4 s1", 14336, 4096, 64, 4, 1, 8, false, 4},
        {"8B gate_up m32 t2 s1", 14336, 4096, 32, 4, 1, 8, false, 2},
        {"70B gate_up m64 t4 s1", 28672, 8192, 64, 4, 1, 8, false, 4},
        {"8B down m64 t4 s4", 4096, 14336, 64, 4, 4, 8, false, 4},
        {"8B k_v m64 t4 s8", 1024, 4096, 64, 4, 8, 0, false, 4},
        {"8B k_v m64 t4 s4", 1024, 4096, 64, 4, 4, 0, false, 4},
        {"8B q_o m16 sc2 s4 xw6", 4096, 4096, 16, 2, 4, 6, false},
        {"8B q_o m16 t1 s2", 4096, 4096, 16, 4, 2, 8, false, 1},
        {"8B q_o m16 t1 s1", 4096, 4096, 16, 4, 1, 8, false, 1},
        {"70B k_v m16 s8 xw8", 1024, 8192, 16, 4, 8, 8, false},
        {"70B k_v m16 t1 s8", 1024, 8192, 16, 4, 8, 0, false, 1},
        {"8B k_v m16 s8", 1024, 4096, 16, 4, 8, 0, false},
        {"8B k_v m16 t1 s8", 1024, 4096, 16, 4, 8, 0, false, 1},
        {"8B down m16 s4 xw8", 4096, 14336, 16, 4, 4, 8, false},
        {"8B down m16 t1 s2", 4096, 14336, 16, 4, 2, 8, false, 1},
        {"70B q_o m16 s2 xw8", 8192, 8192, 16, 4, 2, 8, false},
        {"70B q_o m16 t1 s1", 8192, 8192, 16, 4, 1, 8, false, 1},
        {"8B q_o m8 sc4 s4", 4096, 4096, 8, 4, 4, 0, false},
        {"70B k_v m8 sc4 s16", 1024, 8192, 8, 4, 16, 0, false},
    };
  // "pairs": 64-row CTAs (rb 2, " r64") and the pair sum (two slices
  // as clusters of (1, 2, 1), slice 1's sums pushed into slice 0's shared
  // memory) beside 128-row plans with tickets; each output's largest
  // difference from its group's first plan (the same token count and
  // shape), with "identical" where the bits are the same (a pair must
  // match the ticket sum over the same two slices).
  const bool pairs = argc > 1 && (strcmp(argv[1], "pairs") == 0 || strcmp(argv[1], "pairwin") == 0 ||
                                  strcmp(argv[1], "win128") == 0 || strcmp(argv[1], "kvtime") == 0 ||
                                  strcmp(argv[1], "kvbytes") == 0 ||
                                  strcmp(argv[1], "hy") == 0 ||
                                  strcmp(argv[1], "hyall") == 0);
  if (argc > 1 && strcmp(argv[1], "kvtrace") == 0)
    plans = {
        {"70B k_v m1 s16", 1024, 8192, 1, 4, 16, 0, false},
        {"70B k_v m1 sc2 s16", 1024, 8192, 1, 2, 16, 0, false},
        {"70B k_v m1 r64 s8", 1024, 8192, 1, 4, 8, 0, false, 0, 2},
        {"70B k_v m1 r64 sc2 s16", 1024, 8192, 1, 2, 16, 0, false, 0, 2},
        {"70B k_v m1 s1", 1024, 8192, 1, 4, 1, 0, false},
        {"8B q_o m1 r64 s2 pair", 4096, 4096, 1, 2, 2, 0, false, 0, 2, true},
        {"8B q_o m64 r64 s2 pair xw8", 4096, 4096, 64, 2, 2, 8, false, 0, 2, true},
    };
  // "hy": probe_hybrid.cuh's 32-row CTAs (the producer's ring, four
  // mma.sp consumers taking stages in turn) summed as pairs, whole and in
  // windows of 16 chunks, beside the planner's plans; "hyall" more token
  // counts, the same with tickets, and 8B k/v (docs/kernels.md; at 64
  // tokens its shared memory is over the limit); "hytrace"
  // the timelines of "hy".
  if (argc > 1 && (strcmp(argv[1], "hy") == 0 || strcmp(argv[1], "hytrace") == 0))
    plans = {
        {"70B k_v m1 hy s2 pair", 1024, 8192, 1, 4, 2, 0, false, 0, 1, true, true},
        {"70B k_v m1 hy s2 pair xw16", 1024, 8192, 1, 4, 2, 16, false, 0, 1, true, true},
        {"70B k_v m1 s16", 1024, 8192, 1, 4, 16, 0, false},
        {"70B k_v m2 hy s2 pair", 1024, 8192, 2, 4, 2, 0, false, 0, 1, true, true},
        {"70B k_v m2 s16", 1024, 8192, 2, 4, 16, 0, false},
        {"70B k_v m4 hy s2 pair", 1024, 8192, 4, 4, 2, 0, false, 0, 1, true, true},
        {"70B k_v m4 hy s2 pair xw16", 1024, 8192, 4, 4, 2, 16, false, 0, 1, true, true},
        {"70B k_v m4 s16", 1024, 8192, 4, 4, 16, 0, false},
        {"70B k_v m8 hy s2 pair", 1024, 8192, 8, 4, 2, 0, false, 0, 1, true, true},
        {"70B k_v m8 hy s2 pair xw16", 1024, 8192, 8, 4, 2, 16, false, 0, 1, true, true},
        {"70B k_v m8 s16", 1024, 8192, 8, 4, 16, 0, false},
        {"70B k_v m16 hy s2 pair xw16", 1024, 8192, 16, 4, 2, 16, false, 0, 1, true, true},
        {"70B k_v m16 s8 xw8", 1024, 8192, 16, 4, 8, 8, false},
    };
  if (argc > 1 && strcmp(argv[1], "hyall") == 0)
    plans = {
        {"70B k_v m1 hy s2", 1024, 8192, 1, 4, 2, 0, false, 0, 1, false, true},
        {"70B k_v m1 hy s2 pair", 1024, 8192, 1, 4, 2, 0, false, 0, 1, true, true},
        {"70B k_v m1 hy sc2 s2 pair", 1024, 8192, 1, 2, 2, 0, false, 0, 1, true, true},
        {"70B k_v m1 s16", 1024, 8192, 1, 4, 16, 0, false},
        {"70B k_v m8 hy s2", 1024, 8192, 8, 4, 2, 0, false, 0, 1, false, true},
        {"70B k_v m8 hy s2 pair", 1024, 8192, 8, 4, 2, 0, false, 0, 1, true, true},
        {"70B k_v m8 s16", 1024, 8192, 8, 4, 16, 0, false},
        {"70B k_v m16 hy sc2 s2", 1024, 8192, 16, 2, 2, 0, false, 0, 1, false, true},
        {"70B k_v m16 hy sc2 s2 pair", 1024, 8192, 16, 2, 2, 0, false, 0, 1, true, true},
        {"70B k_v m16 hy s2 pair xw16", 1024, 8192, 16, 4, 2, 16, false, 0, 1, true, true},
        {"70B k_v m16 s8 xw8", 1024, 8192, 16, 4, 8, 8, false},
        {"70B k_v m32 hy sc2 s2 xw16", 1024, 8192, 32, 2, 2, 16, false, 0, 1, false, true},
        {"70B k_v m32 hy sc2 s2 pair xw16", 1024, 8192, 32, 2, 2, 16, false, 0, 1, true, true},
        {"70B k_v m32 s16 coop", 1024, 8192, 32, 4, 16, 0, true},
        {"8B k_v m1 hy s2", 1024, 4096, 1, 4, 2, 0, false, 0, 1, false, true},
        {"8B k_v m1 hy s2 pair", 1024, 4096, 1, 4, 2, 0, false, 0, 1, true, true},
        {"8B k_v m1 s16", 1024, 4096, 1, 4, 16, 0, false},
        {"8B k_v m16 hy s2", 1024, 4096, 16, 4, 2, 0, false, 0, 1, false, true},
        {"8B k_v m16 hy s2 pair", 1024, 4096, 16, 4, 2, 0, false, 0, 1, true, true},
        {"8B k_v m16 s8", 1024, 4096, 16, 4, 8, 0, false},
    };
  if (pairs && strcmp(argv[1], "win128") == 0)
    plans = {
        {"8B q_o m1 r64 s2 pair xw0", 4096, 4096, 1, 2, 2, 0, false, 0, 2, true},
        {"8B q_o m1 r64 s2 pair xw16", 4096, 4096, 1, 2, 2, 16, false, 0, 2, true},
        {"8B q_o m8 r64 s2 pair xw0", 4096, 4096, 8, 2, 2, 0, false, 0, 2, true},
        {"8B q_o m8 r64 s2 pair xw16", 4096, 4096, 8, 2, 2, 16, false, 0, 2, true},
        {"8B down m1 r64 s2 pair xw0", 4096, 14336, 1, 2, 2, 0, false, 0, 2, true},
        {"8B down m1 r64 s2 pair xw16", 4096, 14336, 1, 2, 2, 16, false, 0, 2, true},
        {"8B gate_up m1 s1 xw8", 14336, 4096, 1, 4, 1, 8, false},
        {"8B gate_up m1 s1 xw16", 14336, 4096, 1, 4, 1, 16, false},
        {"8B gate_up m1 s1 xw0", 14336, 4096, 1, 4, 1, 0, false},
        {"8B gate_up m16 s1 xw8", 14336, 4096, 16, 4, 1, 8, false},
        {"8B gate_up m16 s1 xw16", 14336, 4096, 16, 4, 1, 16, false},
        {"8B gate_up m16 sc2 s1 xw16", 14336, 4096, 16, 2, 1, 16, false},
        {"8B gate_up m32 s1 xw8", 14336, 4096, 32, 4, 1, 8, false},
        {"8B gate_up m32 s1 xw12", 14336, 4096, 32, 4, 1, 12, false},
        {"8B gate_up m32 sc2 s1 xw16", 14336, 4096, 32, 2, 1, 16, false},
        {"8B gate_up m64 sc2 s1 xw6", 14336, 4096, 64, 2, 1, 6, false},
        {"8B gate_up m64 sc2 s1 xw8", 14336, 4096, 64, 2, 1, 8, false},
        {"70B q_o m16 s2 pair xw8", 8192, 8192, 16, 4, 2, 8, false, 0, 4, true},
        {"70B q_o m16 s2 pair xw16", 8192, 8192, 16, 4, 2, 16, false, 0, 4, true},
        {"70B q_o m16 sc2 s2 pair xw16", 8192, 8192, 16, 2, 2, 16, false, 0, 4, true},
        {"70B q_o m32 s2 pair xw8", 8192, 8192, 32, 4, 2, 8, false, 0, 4, true},
        {"70B q_o m32 s2 pair xw12", 8192, 8192, 32, 4, 2, 12, false, 0, 4, true},
        {"70B q_o m32 sc2 s2 pair xw16", 8192, 8192, 32, 2, 2, 16, false, 0, 4, true},
        {"70B q_o m64 t4 s1 xw8", 8192, 8192, 64, 4, 1, 8, false, 4},
        {"70B q_o m64 sc2 t4 s1 xw16", 8192, 8192, 64, 2, 1, 16, false, 4},
        {"70B q_o m64 sc2 t4 s1 xw8", 8192, 8192, 64, 2, 1, 8, false, 4},
        {"70B gate_up m16 s1 xw8", 28672, 8192, 16, 4, 1, 8, false},
        {"70B gate_up m16 s1 xw16", 28672, 8192, 16, 4, 1, 16, false},
        {"70B gate_up m64 sc2 s1 xw6", 28672, 8192, 64, 2, 1, 6, false},
        {"70B gate_up m64 sc2 s1 xw8", 28672, 8192, 64, 2, 1, 8, false},
        {"70B down m16 s2 pair xw8", 8192, 28672, 16, 4, 2, 8, false, 0, 4, true},
        {"70B down m16 s2 pair xw16", 8192, 28672, 16, 4, 2, 16, false, 0, 4, true},
        {"70B down m32 s2 pair xw8", 8192, 28672, 32, 4, 2, 8, false, 0, 4, true},
        {"70B down m32 sc2 s2 pair xw16", 8192, 28672, 32, 2, 2, 16, false, 0, 4, true},
    };
  else if (pairs && strcmp(argv[1], "pairwin") == 0)
    plans = {
        {"8B down m8 r64 s2 pair xw0", 4096, 14336, 8, 2, 2, 0, false, 0, 2, true},
        {"8B down m8 r64 s2 pair xw16", 4096, 14336, 8, 2, 2, 16, false, 0, 2, true},
        {"8B down m8 r64 s2 pair xw36", 4096, 14336, 8, 2, 2, 36, false, 0, 2, true},
        {"8B down m16 r64 s2 pair xw8", 4096, 14336, 16, 2, 2, 8, false, 0, 2, true},
        {"8B down m16 r64 s2 pair xw12", 4096, 14336, 16, 2, 2, 12, false, 0, 2, true},
        {"8B down m16 r64 s2 pair xw16", 4096, 14336, 16, 2, 2, 16, false, 0, 2, true},
        {"8B down m16 r64 s2 pair xw24", 4096, 14336, 16, 2, 2, 24, false, 0, 2, true},
        {"8B down m16 r64 s2 pair xw36", 4096, 14336, 16, 2, 2, 36, false, 0, 2, true},
        {"8B down m32 r64 s2 pair xw6", 4096, 14336, 32, 2, 2, 6, false, 0, 2, true},
        {"8B down m32 r64 s2 pair xw8", 4096, 14336, 32, 2, 2, 8, false, 0, 2, true},
        {"8B down m32 r64 s2 pair xw12", 4096, 14336, 32, 2, 2, 12, false, 0, 2, true},
        {"8B down m32 r64 s2 pair xw16", 4096, 14336, 32, 2, 2, 16, false, 0, 2, true},
        {"8B down m64 r64 s2 pair xw6", 4096, 14336, 64, 2, 2, 6, false, 0, 2, true},
        {"8B down m64 r64 s2 pair xw8", 4096, 14336, 64, 2, 2, 8, false, 0, 2, true},
        {"8B q_o m16 r64 s2 pair xw0", 4096, 4096, 16, 2, 2, 0, false, 0, 2, true},
        {"8B q_o m16 r64 s2 pair xw8", 4096, 4096, 16, 2, 2, 8, false, 0, 2, true},
        {"8B q_o m16 r64 s2 pair xw16", 4096, 4096, 16, 2, 2, 16, false, 0, 2, true},
        {"8B q_o m32 r64 s2 pair xw6", 4096, 4096, 32, 2, 2, 6, false, 0, 2, true},
        {"8B q_o m32 r64 s2 pair xw8", 4096, 4096, 32, 2, 2, 8, false, 0, 2, true},
        {"8B q_o m32 r64 s2 pair xw12", 4096, 4096, 32, 2, 2, 12, false, 0, 2, true},
        {"8B q_o m32 r64 s2 pair xw16", 4096, 4096, 32, 2, 2, 16, false, 0, 2, true},
        {"8B q_o m64 r64 s2 pair xw6", 4096, 4096, 64, 2, 2, 6, false, 0, 2, true},
        {"8B q_o m64 r64 s2 pair xw8", 4096, 4096, 64, 2, 2, 8, false, 0, 2, true},
    };
  else if (pairs && strcmp(argv[1], "hy") != 0 && strcmp(argv[1], "hyall") != 0)
    plans = {
        {"8B q_o m1 s2", 4096, 4096, 1, 4, 2, 0, false},
        {"8B q_o m1 s4 xw8", 4096, 4096, 1, 4, 4, 8, false},
        {"8B q_o m1 r64 s2", 4096, 4096, 1, 4, 2, 0, false, 0, 2},
        {"8B q_o m1 r64 s2 pair", 4096, 4096, 1, 4, 2, 0, false, 0, 2, true},
        {"8B q_o m1 r64 s2 pair sc2", 4096, 4096, 1, 2, 2, 0, false, 0, 2, true},
        {"8B q_o m8 s4", 4096, 4096, 8, 4, 4, 0, false},
        {"8B q_o m8 r64 s2 pair", 4096, 4096, 8, 4, 2, 0, false, 0, 2, true},
        {"8B q_o m8 r64 s2 pair sc2", 4096, 4096, 8, 2, 2, 0, false, 0, 2, true},
        {"8B q_o m16 s2", 4096, 4096, 16, 4, 2, 0, false},
        {"8B q_o m16 s4", 4096, 4096, 16, 4, 4, 0, false},
        {"8B q_o m16 r64 s2", 4096, 4096, 16, 4, 2, 0, false, 0, 2},
        {"8B q_o m16 r64 s2 pair", 4096, 4096, 16, 4, 2, 0, false, 0, 2, true},
        {"8B q_o m16 r64 s2 pair xw8", 4096, 4096, 16, 4, 2, 8, false, 0, 2, true},
        {"8B q_o m16 r64 s2 pair sc2", 4096, 4096, 16, 2, 2, 0, false, 0, 2, true},
        {"8B q_o m32 s2 xw8", 4096, 4096, 32, 4, 2, 8, false},
        {"8B q_o m32 s4 xw8", 4096, 4096, 32, 4, 4, 8, false},
        {"8B q_o m32 r64 s2 pair xw8", 4096, 4096, 32, 4, 2, 8, false, 0, 2, true},
        {"8B q_o m32 r64 s2 pair sc2 xw8", 4096, 4096, 32, 2, 2, 8, false, 0, 2, true},
        {"8B q_o m64 s2 xw6", 4096, 4096, 64, 2, 2, 6, false},
        {"8B q_o m64 sc2 s4 xw6", 4096, 4096, 64, 2, 4, 6, false},
        {"8B q_o m64 r64 s2 pair xw6", 4096, 4096, 64, 2, 2, 6, false, 0, 2, true},
        {"8B q_o m64 r64 s2 pair xw8", 4096, 4096, 64, 2, 2, 8, false, 0, 2, true},
        {"8B q_o m64 r64 s2 pair sc4 xw4", 4096, 4096, 64, 4, 2, 4, false, 0, 2, true},
        {"8B down m1 s4", 4096, 14336, 1, 4, 4, 0, false},
        {"8B down m1 r64 s2 pair", 4096, 14336, 1, 4, 2, 0, false, 0, 2, true},
        {"8B down m16 s2 xw8", 4096, 14336, 16, 4, 2, 8, false},
        {"8B down m16 s4 xw8", 4096, 14336, 16, 4, 4, 8, false},
        {"8B down m16 r64 s2 pair xw8", 4096, 14336, 16, 4, 2, 8, false, 0, 2, true},
        {"8B down m32 s4 xw8", 4096, 14336, 32, 4, 4, 8, false},
        {"8B down m32 r64 s2 pair xw8", 4096, 14336, 32, 4, 2, 8, false, 0, 2, true},
        {"8B down m64 s2 xw6", 4096, 14336, 64, 2, 2, 6, false},
        {"8B down m64 sc2 s4 xw6", 4096, 14336, 64, 2, 4, 6, false},
        {"8B down m64 r64 s2 pair xw6", 4096, 14336, 64, 2, 2, 6, false, 0, 2, true},
        {"70B q_o m1 s2", 8192, 8192, 1, 4, 2, 0, false},
        {"70B q_o m1 s1 xw8", 8192, 8192, 1, 4, 1, 8, false},
        {"70B q_o m1 s2 pair", 8192, 8192, 1, 4, 2, 0, false, 0, 4, true},
        {"70B q_o m16 s2 xw8", 8192, 8192, 16, 4, 2, 8, false},
        {"70B q_o m16 s1 xw8", 8192, 8192, 16, 4, 1, 8, false},
        {"70B q_o m16 r64 s1 xw8", 8192, 8192, 16, 4, 1, 8, false, 0, 2},
        {"70B q_o m16 s2 pair xw8", 8192, 8192, 16, 4, 2, 8, false, 0, 4, true},
        {"70B q_o m64 sc2 s2 xw6", 8192, 8192, 64, 2, 2, 6, false},
        {"70B q_o m64 s1 xw6", 8192, 8192, 64, 2, 1, 6, false},
        {"70B q_o m64 r64 s1 xw6", 8192, 8192, 64, 2, 1, 6, false, 0, 2},
        {"70B q_o m64 sc2 s2 pair xw6", 8192, 8192, 64, 2, 2, 6, false, 0, 4, true},
        {"70B q_o m64 t4 s1", 8192, 8192, 64, 4, 1, 8, false, 4},
        {"70B down m1 s2", 8192, 28672, 1, 4, 2, 8, false},
        {"70B down m1 s2 pair", 8192, 28672, 1, 4, 2, 8, false, 0, 4, true},
        {"70B down m16 s2 xw8", 8192, 28672, 16, 4, 2, 8, false},
        {"70B down m16 s2 pair xw8", 8192, 28672, 16, 4, 2, 8, false, 0, 4, true},
        {"70B down m64 sc2 s2 xw6", 8192, 28672, 64, 2, 2, 6, false},
        {"70B down m64 sc2 s2 pair xw6", 8192, 28672, 64, 2, 2, 6, false, 0, 4, true},
        {"8B gate_up m64 s1 xw6", 14336, 4096, 64, 2, 1, 6, false},
        {"8B gate_up m64 r64 s1 xw6", 14336, 4096, 64, 2, 1, 6, false, 0, 2},
        {"8B k_v m1 s10", 1024, 4096, 1, 4, 10, 0, false},
        {"8B k_v m1 r64 s8", 1024, 4096, 1, 4, 8, 0, false, 0, 2},
        {"8B k_v m1 r64 s4", 1024, 4096, 1, 4, 4, 0, false, 0, 2},
        {"70B k_v m1 s8", 1024, 8192, 1, 4, 8, 0, false},
        {"70B k_v m1 s16", 1024, 8192, 1, 4, 16, 0, false},
        {"70B k_v m1 r64 s8", 1024, 8192, 1, 4, 8, 0, false, 0, 2},
        {"70B k_v m16 s8 xw8", 1024, 8192, 16, 4, 8, 8, false},
        {"70B k_v m16 r64 s8 xw8", 1024, 8192, 16, 4, 8, 8, false, 0, 2},
    };
  if (argc > 1 && strcmp(argv[1], "kvtime") == 0)
    plans = {
        {"70B k_v m1 s16", 1024, 8192, 1, 4, 16, 0, false},
        {"70B k_v m1 sc2 s16", 1024, 8192, 1, 2, 16, 0, false},
        {"70B k_v m1 s8", 1024, 8192, 1, 4, 8, 0, false},
        {"70B k_v m1 r64 s8", 1024, 8192, 1, 4, 8, 0, false, 0, 2},
        {"70B k_v m1 r64 sc2 s8", 1024, 8192, 1, 2, 8, 0, false, 0, 2},
        {"70B k_v m1 r64 sc2 s16", 1024, 8192, 1, 2, 16, 0, false, 0, 2},
        {"70B k_v m1 r64 sc2 s32", 1024, 8192, 1, 2, 32, 0, false, 0, 2},
        {"70B k_v m1 sc2 s32", 1024, 8192, 1, 2, 32, 0, false},
        {"8B k_v m1 s16", 1024, 4096, 1, 4, 16, 0, false},
        {"8B k_v m1 r64 s8", 1024, 4096, 1, 4, 8, 0, false, 0, 2},
        {"8B k_v m1 r64 sc2 s16", 1024, 4096, 1, 2, 16, 0, false, 0, 2},
    };
  // "kvbytes": 70B k/v beside a shape with its bytes per CTA and its
  // CTAs (4096 × 2048 in 64-row CTAs × 2 slices: 128 CTAs of 72 KB, as
  // 70B k/v's 128 rows × 16 slices) summed as a pair: what pairs of
  // 16-row CTAs could reach on 70B k/v (docs/kernels.md).
  if (argc > 1 && strcmp(argv[1], "kvbytes") == 0)
    plans = {
        {"70B k_v m1 s16", 1024, 8192, 1, 4, 16, 0, false},
        {"70B k_v m1 sc2 s16", 1024, 8192, 1, 2, 16, 0, false},
        {"kvbytes 4096x2048 m1 r64 s2", 4096, 2048, 1, 4, 2, 0, false, 0, 2},
        {"kvbytes 4096x2048 m1 r64 s2 pair", 4096, 2048, 1, 4, 2, 0, false, 0, 2, true},
        {"kvbytes 4096x2048 m1 r64 sc2 s2 pair", 4096, 2048, 1, 2, 2, 0, false, 0, 2, true},
        {"kvbytes 4096x2048 m1 s2 pair", 4096, 2048, 1, 4, 2, 0, false, 0, 4, true},
        {"kvbytes 4096x2048 m1 sc2 s2 pair", 4096, 2048, 1, 2, 2, 0, false, 0, 4, true},
        {"kvbytes 4096x2304 m1 r64 s2 pair", 4096, 2304, 1, 4, 2, 0, false, 0, 2, true},
        {"70B k_v m8 s16", 1024, 8192, 8, 4, 16, 0, false},
        {"kvbytes 4096x2048 m8 r64 s2 pair", 4096, 2048, 8, 4, 2, 0, false, 0, 2, true},
        {"kvbytes 4096x2048 m8 r64 sc2 s2 pair", 4096, 2048, 8, 2, 2, 0, false, 0, 2, true},
        {"70B k_v m16 s8 xw8", 1024, 8192, 16, 4, 8, 8, false},
        {"kvbytes 4096x2048 m16 r64 s2 pair", 4096, 2048, 16, 4, 2, 0, false, 0, 2, true},
        {"kvbytes 4096x2048 m16 r64 sc2 s2 pair", 4096, 2048, 16, 2, 2, 0, false, 0, 2, true},
        {"kvbytes 4096x2048 m16 s2 pair", 4096, 2048, 16, 4, 2, 0, false, 0, 4, true},
        {"70B k_v m64 s16 coop", 1024, 8192, 64, 4, 16, 0, true},
        {"kvbytes 4096x2048 m64 r64 s2 pair xw8", 4096, 2048, 64, 2, 2, 8, false, 0, 2, true},
        {"8B k_v m1 s16", 1024, 4096, 1, 4, 16, 0, false},
        {"kvbytes 4096x1024 m1 r64 s2 pair", 4096, 1024, 1, 4, 2, 0, false, 0, 2, true},
        {"kvbytes 4096x1024 m1 r64 sc2 s2 pair", 4096, 1024, 1, 2, 2, 0, false, 0, 2, true},
    };
  if (windows)
    plans = {
        {"8B gate_up m64 sc2 s1 xw6", 14336, 4096, 64, 2, 1, 6, false},
        {"8B gate_up m64 sc4 s1 xw4", 14336, 4096, 64, 4, 1, 4, false},
        {"8B gate_up m64 sc2 s1 xw8", 14336, 4096, 64, 2, 1, 8, false},
        {"8B gate_up m32 sc4 s1 xw8", 14336, 4096, 32, 4, 1, 8, false},
        {"8B gate_up m32 sc4 s1 xw4", 14336, 4096, 32, 4, 1, 4, false},
        {"8B down m64 sc2 s4 xw6", 4096, 14336, 64, 2, 4, 6, false},
        {"8B down m64 sc4 s4 xw4", 4096, 14336, 64, 4, 4, 4, false},
        {"8B down m64 sc2 s4 xw8", 4096, 14336, 64, 2, 4, 8, false},
        {"8B q_o m64 sc2 s4 xw6", 4096, 4096, 64, 2, 4, 6, false},
        {"8B q_o m64 sc4 s4 xw4", 4096, 4096, 64, 4, 4, 4, false},
        {"8B q_o m64 sc2 s4 xw8", 4096, 4096, 64, 2, 4, 8, false},
        {"70B q_o m64 sc2 s2 xw6", 8192, 8192, 64, 2, 2, 6, false},
        {"70B q_o m64 sc4 s2 xw4", 8192, 8192, 64, 4, 2, 4, false},
        {"70B q_o m64 sc2 s2 xw8", 8192, 8192, 64, 2, 2, 8, false},
        {"70B down m64 sc2 s2 xw6", 8192, 28672, 64, 2, 2, 6, false},
        {"70B down m64 sc4 s2 xw4", 8192, 28672, 64, 4, 2, 4, false},
        {"70B down m64 sc2 s2 xw8", 8192, 28672, 64, 2, 2, 8, false},
        {"70B gate_up m64 sc2 s1 xw6", 28672, 8192, 64, 2, 1, 6, false},
        {"70B gate_up m64 sc4 s1 xw4", 28672, 8192, 64, 4, 1, 4, false},
        {"70B gate_up m64 sc2 s1 xw8", 28672, 8192, 64, 2, 1, 8, false},
    };
  std::vector<uint32_t> ref;  // windows, pairs: the outputs of the group's first plan
  std::string refKey;         // pairs: the group of ref
  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  const size_t wsBytes = 32 << 20;
  void* ws;
  CK(cudaMalloc(&ws, wsBytes));
  printf("%-26s %7s %9s %7s %9s %10s %7s | %7s %7s %7s  %s\n", "plan (us per step)", "alone", "alone+pdl", "after",
         "after+pdl", "afterT+pdl", "writer", "dense", "d after", "d afterT", "outputs");
  for (const Plan& p : plans) {
    const int chunks = p.k / 64;
    const int cps = (chunks + p.splits - 1) / p.splits;
    const int nt = p.tiles ? p.tiles : p.m <= 8 ? 1 : p.m <= 16 ? 2 : p.m <= 32 ? 4 : 8;
    const bool windowed = p.xwin > 0 && p.xwin < cps;
    const int xcap = windowed ? p.xwin : (cps + p.sc - 1) / p.sc * p.sc;
    const int ring = depth(p.sc) * (4 / p.rb);  // kernel_wg's ST
    int smem = p.rb * ring * stage_bytes(p.sc) + 1024 + (windowed ? 2 : 1) * xcap * 8 * nt * 128 + 16 * ring +
                     (p.rb == 2 ? 2 * 512 * nt : 0) + (p.pair ? p.rb * (1024 * nt + 8) : 0);
    WgKernel fn = wg_kernel_rb(nt, p.sc, p.rb, p.pair);
    if (p.hy) {  // probe_hybrid.cuh's layout
#if SFS_PROBE_HYBRID
      const int xw = windowed ? p.xwin : cps, rows = std::min(p.m, 8 * nt);
      smem = ring * stage_bytes(p.sc) + (windowed ? 2 : 1) * 4 * (rows + 1) * (xw * 32 + 4) + 16 * ring +
             3 * 1024 * nt + (p.pair ? 1024 * nt + 8 : 0);
      fn = hy_kernel(nt, p.sc, p.pair);
#else
      fprintf(stderr, "%s: the hybrid plans need the default GEMV_WG_CUH\n", p.name);
      return 1;
#endif
    }
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // Counters at 0, below the partial sums and (token groups) between them.
    CK(cudaMemset(w, 0, workBytes));
    const dim3 grid((p.n + 32 * p.rb - 1) / (32 * p.rb), p.splits, (p.m + 8 * nt - 1) / (8 * nt));
    const size_t xn = size_t(p.m) * p.k;

    // queue_steps captures kSteps steps on st: with writer, each step writes
    // X first; with pdl, the products carry the programmatic attribute.
    auto product = [&](int i, bool pdl, bool cluster = false) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = grid;
      cfg.blockDim = dim3(160);
      cfg.dynamicSmemBytes = smem;
      cfg.stream = st;
      cudaLaunchAttribute at[3];
      int na = 0;
      if (p.coop) {
        at[na].id = cudaLaunchAttributeCooperative;
        at[na++].val.cooperative = 1;
      }
      if (pdl) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na++].val.programmaticStreamSerializationAllowed = 1;
      }
      if (cluster || p.pair || pairs && grid.z == 2) {  // pairs: two token groups as in bench
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = 1;
        at[na].val.clusterDim.y = p.pair ? 2 : 1;
        at[na++].val.clusterDim.z = p.pair ? 1 : grid.z;
      }
      cfg.attrs = at;
      cfg.numAttrs = na;
      CK(cudaLaunchKernelEx(&cfg, fn, ys[i], (const uint16_t*)x, (const uint16_t*)pack[i % kRot],
                            (const uint32_t*)meta[i % kRot], work, p.m, p.n, p.k, p.xwin, p.coop ? 1 : 0));
    };
    Dense dense(lt, ws, wsBytes, CUDA_R_16BF, CUDA_R_32F, p.m, p.n, p.k);
    // graph captures kSteps steps: writer 0 none, 1 plain, 2 triggering;
    // then product 0 none, 1 ours, 2 ours with the attribute, 3 dense.
    auto graph = [&](int writer, int product_) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
      for (int i = 0; i < kSteps; ++i) {
        if (writer == 1) writex<<<sms, 256, 0, st>>>(x, xn, i);
        if (writer == 2) writex_trigger<<<sms, 256, 0, st>>>(x, xn, i);
        if (product_ == 1 || product_ == 2) product(i, product_ == 2);
        if (product_ == 4) product(i, false, true);
        if (product_ == 3) dense.run(ys[i], x, pack[i % kRot], st);
      }
      CK(cudaStreamEndCapture(st, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      CK(cudaGraphDestroy(g));
      return ge;
    };
    auto time = [&](cudaGraphExec_t ge) {
      CK(cudaGraphLaunch(ge, st));
      return batch_median(busy, st, kSteps, [&] { CK(cudaGraphLaunch(ge, st)); });
    };
    // outputs: the kSteps Y buffers after one replay of ge.
    auto outputs = [&](cudaGraphExec_t ge) {
      for (auto y : ys) CK(cudaMemsetAsync(y, 0xff, size_t(p.m) * p.n * 4, st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaStreamSynchronize(st));
      std::vector<uint32_t> all(size_t(kSteps) * p.m * p.n);
      for (int i = 0; i < kSteps; ++i)
        CK(cudaMemcpy(all.data() + size_t(i) * p.m * p.n, ys[i], size_t(p.m) * p.n * 4, cudaMemcpyDeviceToHost));
      return all;
    };
    if (trace) {
      product(1, false);
      queue_busy(busy, 0, st);
      product(2, false);
      CK(cudaStreamSynchronize(st));
      printf("%-28s %3d CTAs:", p.name, grid.x * grid.y);
      print_trace(grid.x * grid.y);
      continue;
    }
    if (clusters) {
      if (grid.z == 1) {
        cudaGraphExec_t plain = graph(0, 1);
        float t[3];
        for (int r = 0; r < 3; ++r) t[r] = time(plain);
        printf("%-22s grid %3dx%-2dx%d                    | plain %6.2f %6.2f %6.2f\n", p.name, grid.x, grid.y, grid.z,
               t[0], t[1], t[2]);
        CK(cudaGraphExecDestroy(plain));
      } else {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = dim3(160);
        cfg.dynamicSmemBytes = smem;
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = 1;
        at.val.clusterDim.y = 1;
        at.val.clusterDim.z = grid.z;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        int most = 0;
        CK(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        CK(cudaOccupancyMaxActiveClusters(&most, fn, &cfg));
        cudaGraphExec_t plain = graph(0, 1), clu = graph(0, 4);
        float t[6];
        for (int r = 0; r < 6; ++r) t[r] = time(r % 2 ? clu : plain);
        const bool same = outputs(plain) == outputs(clu);
        printf("%-22s grid %3dx%-2dx%d clusters %3d at once | plain %6.2f %6.2f %6.2f | cluster %6.2f %6.2f %6.2f  %s\n",
               p.name, grid.x, grid.y, grid.z, most, t[0], t[2], t[4], t[1], t[3], t[5], same ? "identical" : "DIFFERS");
        CK(cudaGraphExecDestroy(plain));
        CK(cudaGraphExecDestroy(clu));
      }
      continue;
    }
    if (groups) {
      cudaGraphExec_t ge = graph(0, 1);
      const float t = time(ge);
      const auto out = outputs(ge);
      const bool first = ref.size() != out.size() || !strstr(p.name, " t");
      if (first) ref = out;
      float big = 0, diff = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        float a, b;
        memcpy(&a, &out[i], 4);
        memcpy(&b, &ref[i], 4);
        big = std::max(big, std::fabs(b));
        diff = std::max(diff, std::fabs(a - b));
      }
      printf("%-28s grid %3dx%-2dx%d %7.2f  %s%.1e\n", p.name, grid.x, grid.y, grid.z, t, first ? "ref " : "",
             diff / big);
      CK(cudaGraphExecDestroy(ge));
      continue;
    }
    if (pairs) {
      cudaGraphExec_t ge = graph(0, 1);
      float t[3];
      for (int r = 0; r < 3; ++r) t[r] = time(ge);
      const auto out = outputs(ge);
      const auto again = outputs(ge);
      // The group: the name up to and including its token count ("8B q_o m16").
      const char* g = strchr(strchr(p.name, ' ') + 1, ' ');
      g = strchr(g + 1, ' ');
      const std::string key(p.name, g ? g - p.name : strlen(p.name));
      const bool first = key != refKey;
      if (first) ref = out, refKey = key;
      float big = 0, diff = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        float a, b;
        memcpy(&a, &out[i], 4);
        memcpy(&b, &ref[i], 4);
        big = std::max(big, std::fabs(b));
        diff = std::max(diff, std::fabs(a - b));
      }
      printf("%-30s grid %3dx%-2d smem %6d %7.2f %7.2f %7.2f  %s%s %.1e\n", p.name, grid.x, grid.y, smem, t[0], t[1],
             t[2], out != again ? "RUNS DIFFER " : "", first ? "ref" : out == ref ? "identical" : "differs", diff / big);
      CK(cudaGraphExecDestroy(ge));
      continue;
    }
    if (alone) {
      cudaGraphExec_t ge = graph(0, 1);
      const float t = time(ge);
      uint64_t h = 1469598103934665603ull;
      for (uint32_t v : outputs(ge)) h = (h ^ v) * 1099511628211ull;
      printf("%-28s %7.2f  %016llx\n", p.name, t, (unsigned long long)h);
      CK(cudaGraphExecDestroy(ge));
      continue;
    }
    if (windows) {
      cudaGraphExec_t ge = graph(0, 1);
      const float t = time(ge);
      const auto out = outputs(ge);
      const bool first = ref.size() != out.size() || strstr(p.name, "xw6") || strstr(p.name, "m32 sc4 s1 xw8");
      if (first) ref = out;
      printf("%-28s %7.2f  %s\n", p.name, t, first ? "" : out == ref ? "identical" : "DIFFERS");
      CK(cudaGraphExecDestroy(ge));
      continue;
    }
    cudaGraphExec_t g[9] = {graph(0, 1), graph(0, 2), graph(1, 1), graph(1, 2), graph(2, 2),
                            graph(1, 0), graph(0, 3), graph(1, 3), graph(2, 3)};
    float us[9];
    for (int i = 0; i < 9; ++i) us[i] = time(g[i]);
    // Outputs: the writer graphs (every step's own X) plain against PDL,
    // and the alone graphs likewise; a second plain run shows the kernel
    // is deterministic, so any difference is a race.
    const auto a0 = outputs(g[2]), a1 = outputs(g[3]), a2 = outputs(g[2]), a3 = outputs(g[4]);
    const auto b0 = outputs(g[0]), b1 = outputs(g[1]);
    const char* verdict = a0 != a2   ? "plain runs differ"
                          : a0 != a1 ? "PDL DIFFERS (after)"
                          : a0 != a3 ? "PDL DIFFERS (afterT)"
                          : b0 != b1 ? "PDL DIFFERS (alone)"
                                     : "identical";
    printf("%-26s %7.2f %9.2f %7.2f %9.2f %10.2f %7.2f | %7.2f %7.2f %7.2f  %s\n", p.name, us[0], us[1], us[2], us[3],
           us[4], us[5], us[6], us[7], us[8], verdict);
    for (auto& e : g) CK(cudaGraphExecDestroy(e));
  }
  return 0;
}
