// splitk_probe.cu: where a prefill launch's time goes on the narrow shapes
// at 128–1,024 tokens, plan by plan (kernels/cuda/spmm_wg.cuh, unsplit or
// split K in clusters), beside dense cuBLASLt and beside an empty kernel
// launched exactly as the plan is (grid, clusters, block, shared memory).
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/splitk \
//     tools/probes/splitk_probe.cu -lcublasLt -lcuda && /tmp/splitk [f16]
//
// Per plan, one line: dense, ours (bf16 out, no bias, as bench times it),
// ours with a bias, and the two empty launches (returning at once; passing
// two cluster barriers), median µs of 7 batches of 20 behind a large copy
// (probe_time.cuh), ‖ours − ref‖/‖ref‖ of the f32 output against the
// tiled mma.sp kernel, and the count of elements of the other outputs
// (16-bit, with bias, 16-bit with bias) that differ bit for bit from the
// f32 output rounded or plus the bias (bad). Then the trace of one launch (no bias) behind a
// large copy: per point of spmm_wg.cuh's SFS_SPMM_TRACE (0 entry, 1
// barriers set up, 2 first stage landed, 3 products done, 4 sums
// published, 5 stores done), min/median/max over the CTAs in µs after the
// first CTA's entry (probe_trace.cuh). The plans are those the planner
// picks ("planned": docs/bench-h200-prefill.md's fit, y in BF16), their
// neighbours (among them the planner's earlier picks for 8B k/v at 256
// and 512 tokens and 8B q/o at 128, indices 4, 5 and 7, kept so that
// runs compare by index), two with tokens and rows off the tile
// ("edges"), and three unsplit 256-row tiles the planner picks for the
// wide shapes at 512–1024 tokens, and four r128 t64 plans of 256 CTAs
// (indices 23–26: two waves with one CTA a SM, as the kernel is built,
// 0.53–0.65x dense on an H200; one wave would need two CTAs a SM, a ring
// of at most 3 of the 128-column slots, 35 KB each, and SPLITK_MIN_BLOCKS
// 2 defined at the top of a $PROBE_VARIANTS header of prefill_run.sh),
// then two with K = 1600 (indices 27 and 28: an odd
// count of 64-column stages, zero-filled past K in the last stage, split
// and unsplit). $SPLITK_PLANS (indices,
// e.g. "0,6") runs only those, as ncu does; $SPLITK_CTAS_PER_SM (default
// 1) sizes an unsplit plan's persistent grid at that many CTAs a SM.
#include "probe_trace.cuh"  // SFS_SPMM_TRACE, before the kernel header

#include <cublasLt.h>
#include <cuda.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "probe_dense.cuh"
#include "probe_spmm.cuh"
#include "probe_time.cuh"

// SPLITK_MIN_BLOCKS is the CTAs a SM that plan_kernel's registers leave
// room for (__launch_bounds__); a $PROBE_VARIANTS header may define it
// (2: at most 128 registers a thread with 256 threads). Run only the r128
// t64 plans with 2: r128 t128's 128 accumulators a thread alone fill the
// cap, and the 256-row tiles' consumers raise their registers to 232
// (setmaxnreg), which two CTAs of 384 threads do not leave free.
#ifndef SPLITK_MIN_BLOCKS
#define SPLITK_MIN_BLOCKS 1
#endif

template <typename T, int NWG, int BN, bool kSplit>
__global__ void __launch_bounds__(sfs::spmm_wg::Shape<NWG, BN>::kThreads, SPLITK_MIN_BLOCKS)
    plan_kernel(void* Y, const __grid_constant__ TensorMap tx, const __grid_constant__ TensorMap tp,
                const __grid_constant__ TensorMap tu, int M, int N, int K, const uint16_t* B, int out, int S) {
  sfs::spmm_wg::kernel<T, NWG, BN, kSplit>(sfs::gemv::Out(Y, B, out), tx, tp, tu, M, N, K, S);
}

// empty_kernel returns at once, or (barriers) after two cluster barriers,
// as split K's sum passes them.
template <bool kBarriers>
__global__ void empty_kernel(int) {
  if (kBarriers) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  }
}

// Plan is a launch of the prefill kernel: tile (NWG consumer warpgroups,
// BN tokens) and splits S of K for an M × N × K product.
struct Plan {
  int N, K, M, NWG, BN, S;
  const char* note;
};

// Launch holds a plan's launch configuration and tensor maps.
struct Launch {
  dim3 grid, block;
  int smem, S;
  TensorMap tx, tp, tu;
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg(cudaStream_t st) {
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = st;
    c.attrs = &attr;
    c.numAttrs = S > 1 ? 1 : 0;
    return c;
  }
};

template <typename T, int NWG, int BN>
Launch prepare(const Problem& p, int S, int ctas) {
  using Sh = sfs::spmm_wg::Shape<NWG, BN>;
  CK(cudaFuncSetAttribute(plan_kernel<T, NWG, BN, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::kSmem));
  CK(cudaFuncSetAttribute(plan_kernel<T, NWG, BN, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::kSmem));
  CK(cudaFuncSetAttribute(empty_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::kSmem));
  CK(cudaFuncSetAttribute(empty_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::kSmem));
  const long units = static_cast<long>((p.M + BN - 1) / BN) * ((p.N + Sh::kRows - 1) / Sh::kRows) * S;
  Launch l;
  l.grid = dim3(static_cast<unsigned>(S > 1 ? units : std::min<long>(units, ctas)));
  l.block = dim3(Sh::kThreads);
  l.smem = Sh::kSmem;
  l.S = S;
  const Maps m = encode_maps<NWG, BN>(p.X, p.P, p.U, p.M, p.N, p.K);
  l.tx = m.tx;
  l.tp = m.tp;
  l.tu = m.tu;
  l.attr.id = cudaLaunchAttributeClusterDimension;
  l.attr.val.clusterDim.x = S;
  l.attr.val.clusterDim.y = 1;
  l.attr.val.clusterDim.z = 1;
  return l;
}

template <typename T, int NWG, int BN>
void run(Launch& l, const Problem& p, const uint16_t* bias, int out) {
  cudaLaunchConfig_t c = l.cfg(0);
  auto fn = l.S > 1 ? plan_kernel<T, NWG, BN, true> : plan_kernel<T, NWG, BN, false>;
  CK(cudaLaunchKernelEx(&c, fn, p.Y, l.tx, l.tp, l.tu, p.M, p.N, p.K, bias, out, l.S));
}

void run_empty(Launch& l, bool barriers) {
  cudaLaunchConfig_t c = l.cfg(0);
  CK(cudaLaunchKernelEx(&c, barriers ? empty_kernel<true> : empty_kernel<false>, 0));
}

// output returns p's output as floats: f32 (out 0) or 16-bit in the
// element type (out 1, f16 or bf16).
std::vector<float> output(const Problem& p, int out, bool f16) {
  const size_t n = static_cast<size_t>(p.M) * p.N;
  std::vector<float> got(n);
  if (out == 0) {
    CK(cudaMemcpy(got.data(), p.Y, n * 4, cudaMemcpyDeviceToHost));
  } else {
    std::vector<uint16_t> h(n);
    CK(cudaMemcpy(h.data(), p.Y, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) got[i] = f32of(f16, h[i]);
  }
  return got;
}

// relerr is ‖got − ref‖/‖ref‖ against p's reference (no bias), a value
// that is not finite (an element never stored: the output is filled with
// 0xFF first) counting as huge.
double relerr(const Problem& p, const std::vector<float>& got) {
  const size_t n = got.size();
  std::vector<float> ref(n);
  CK(cudaMemcpy(ref.data(), p.ref, n * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += std::isfinite(got[i]) ? d * d : 1e30;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// mismatches counts the elements of got (16-bit outputs, as floats) that
// are not want's f32 outputs rounded to the element type, or (bias given)
// want's f32 outputs plus the bias of their row: the kernel adds the bias
// in f32 and rounds once, so both must hold bit for bit.
long mismatches(const std::vector<float>& got, const std::vector<float>& want, bool f16, int N,
                const std::vector<uint16_t>* bias, bool round) {
  long bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    float w = want[i];
    if (bias != nullptr) w += f32of(f16, (*bias)[i % N]);
    if (round) w = f32of(f16, bits16(f16, w));
    if (!(got[i] == w)) ++bad;
  }
  return bad;
}

template <typename T, int NWG, int BN>
void probe(const Plan& pl, const Problem& p, Dense& d, const uint16_t* Wd, const Busy& busy, int ctas) {
  Launch l = prepare<T, NWG, BN>(p, pl.S, ctas);
  // Every output the timed runs store is checked: f32 against the
  // reference, then bit for bit the 16-bit output (the timed one) against
  // the f32 one rounded, the f32 output with bias against the one without
  // plus the bias, and the 16-bit output with bias against that rounded.
  const bool f16 = std::is_same<T, sfs::F16>::value;
  std::vector<uint16_t> bias(p.N);
  CK(cudaMemcpy(bias.data(), p.B, bias.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> got[2][2];  // [bias][out]
  for (int b = 0; b < 2; ++b) {
    for (int out = 0; out < 2; ++out) {
      CK(cudaMemset(p.Y, 0xFF, static_cast<size_t>(p.M) * p.N * 4));
      run<T, NWG, BN>(l, p, b ? p.B : nullptr, out);
      CK(cudaDeviceSynchronize());
      got[b][out] = output(p, out, f16);
    }
  }
  const double err = relerr(p, got[0][0]);
  const long bad = mismatches(got[0][1], got[0][0], f16, p.N, nullptr, true) +
                   mismatches(got[1][0], got[0][0], f16, p.N, &bias, false) +
                   mismatches(got[1][1], got[1][0], f16, p.N, nullptr, true);
  const float tdense = timeit(busy, [&](int) { d.run(p.Y, p.X, Wd); });
  const float tours = timeit(busy, [&](int) { run<T, NWG, BN>(l, p, nullptr, 1); });
  const float tbias = timeit(busy, [&](int) { run<T, NWG, BN>(l, p, p.B, 1); });
  const float tempty = timeit(busy, [&](int) { run_empty(l, false); });
  const float tbar = timeit(busy, [&](int) { run_empty(l, true); });
  printf("%5dx%-5d M=%4d r%d t%-3d s%d  grid %3u: dense %6.2f  ours %6.2f (%.2fx)  bias %6.2f  empty %5.2f  "
         "barriers %5.2f  rel %.1e bad %ld %s  %s\n",
         pl.N, pl.K, pl.M, 128 * NWG, BN, pl.S, l.grid.x, tdense, tours, tdense / tours, tbias, tempty, tbar, err, bad,
         err < 1e-5 && bad == 0 ? "ok" : "FAIL", pl.note);
  queue_busy(busy);
  run<T, NWG, BN>(l, p, nullptr, 1);
  CK(cudaDeviceSynchronize());
  printf("  trace");
  print_trace(static_cast<int>(l.grid.x));
  fflush(stdout);
}

template <typename T>
int probe_all(int ctas) {
  const Plan plans[] = {
      {1024, 4096, 128, 1, 64, 6, "8B k/v, planned"},    {1024, 4096, 128, 1, 64, 4, ""},
      {1024, 4096, 128, 1, 64, 1, "unsplit"},            {1024, 4096, 128, 1, 128, 8, ""},
      {1024, 4096, 256, 1, 128, 5, ""},                  {1024, 4096, 512, 2, 128, 6, ""},
      {1024, 4096, 1024, 1, 64, 1, "8B k/v, planned"},   {4096, 4096, 128, 2, 128, 4, ""},
      {4096, 4096, 128, 1, 64, 1, "unsplit"},            {4096, 4096, 256, 1, 64, 1, "8B q/o, planned"},
      {1024, 8192, 128, 1, 64, 6, "70B k/v, planned"},   {1024, 8192, 512, 2, 128, 6, "70B k/v, planned"},
      {1024, 4096, 2048, 1, 128, 1, "8B k/v, planned"},  {4096, 4096, 512, 1, 128, 1, "8B q/o, planned"},
      {4096, 4096, 1024, 1, 64, 1, ""},          {1056, 4096, 200, 1, 64, 1, "edges"},
      {1056, 4096, 200, 1, 64, 3, "edges"},              {4096, 4096, 1024, 2, 128, 1, "8B q/o, planned"},
      {14336, 4096, 512, 2, 128, 1, "8B gate/up, planned"}, {4096, 14336, 1024, 2, 128, 1, "8B down, planned"},
      {1024, 4096, 256, 1, 64, 3, "8B k/v, planned"},    {1024, 4096, 512, 1, 64, 2, "8B k/v, planned"},
      {4096, 4096, 128, 1, 64, 2, "8B q/o, planned"},
      {1024, 4096, 512, 1, 64, 4, "8B k/v, 256 CTAs"},  {1024, 4096, 1024, 1, 64, 2, "8B k/v, 256 CTAs"},
      {4096, 4096, 256, 1, 64, 2, "8B q/o, 256 CTAs"},  {1024, 8192, 512, 1, 64, 4, "70B k/v, 256 CTAs"},
      {1056, 1600, 200, 1, 64, 3, "edges, odd stages"}, {1056, 1600, 300, 2, 128, 1, "edges, odd stages"},
  };
  std::mt19937 rng(7);
  const Lt lt = make_lt();
  Busy busy = make_busy(256 << 20);
  const bool f16 = std::is_same<T, sfs::F16>::value;
  // SPLITK_PLANS (e.g. "0,6") runs only those plans, by index: for ncu.
  const char* only = getenv("SPLITK_PLANS");
  int idx = -1;
  for (const Plan& pl : plans) {
    ++idx;
    if (only != nullptr) {
      char key[16];
      snprintf(key, sizeof key, ",%d,", idx);
      const std::string list = "," + std::string(only) + ",";
      if (list.find(key) == std::string::npos) continue;
    }
    Problem p = make(rng, f16, pl.M, pl.N, pl.K, true);
    uint16_t* Wd;
    CK(cudaMalloc(&Wd, static_cast<size_t>(pl.N) * pl.K * 2));
    CK(cudaMemset(Wd, 0x3c, static_cast<size_t>(pl.N) * pl.K * 2));
    Dense d(lt, f16 ? CUDA_R_16F : CUDA_R_16BF, f16 ? CUDA_R_16F : CUDA_R_16BF, pl.M, pl.N, pl.K);
    if (pl.NWG == 1 && pl.BN == 64) probe<T, 1, 64>(pl, p, d, Wd, busy, ctas);
    if (pl.NWG == 1 && pl.BN == 128) probe<T, 1, 128>(pl, p, d, Wd, busy, ctas);
    if (pl.NWG == 2 && pl.BN == 128) probe<T, 2, 128>(pl, p, d, Wd, busy, ctas);
    if (pl.NWG == 2 && pl.BN == 192) probe<T, 2, 192>(pl, p, d, Wd, busy, ctas);
    CK(cudaFree(Wd));
    release(p);
  }
  return 0;
}

int main(int argc, char** argv) {
  const bool f16 = argc > 1 && !strcmp(argv[1], "f16");
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const char* per = getenv("SPLITK_CTAS_PER_SM");
  const int ctas = sms * (per != nullptr && atoi(per) > 1 ? atoi(per) : 1);  // an unsplit plan's grid at most
  printf("%s, %d SMs, %s, unsplit grids of at most %d CTAs\n", prop.name, sms, f16 ? "f16" : "bf16", ctas);
  return f16 ? probe_all<sfs::F16>(ctas) : probe_all<sfs::BF16>(ctas);
}
