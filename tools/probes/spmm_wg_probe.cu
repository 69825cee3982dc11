// spmm_wg_probe.cu: the prefill kernel of kernels/cuda/spmm_wg.cuh against
// the tiled mma.sp kernel (spmm.cuh, the reference: same operands, f32)
// and dense cuBLASLt (BF16 or F16 in and out, f32 compute: what
// F.linear runs), on random operands with random valid meta.
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/spmm_wg \
//     tools/probes/spmm_wg_probe.cu -lcublasLt -lcuda && /tmp/spmm_wg [check|time] [f16]
//
// check: every tile shape on small and odd sizes: ‖ours − ref‖/‖ref‖ of the
// f32 output, and the element-type output with a bias against the
// reference rounded (at most one unit in the last place apart). time: the
// eight Llama-3-8B/70B projection shapes at M = 256, 1024, 4096, 16384,
// each tile shape and cuBLASLt in one process, median µs of 7 batches
// (probe_time.cuh), and the ratio dense / ours.
#include <cublasLt.h>
#include <cuda.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "probe_dense.cuh"
#include "probe_spmm.cuh"
#include "probe_time.cuh"


template <typename T, int NWG, int BN>
__global__ void __launch_bounds__(sfs::spmm_wg::Shape<NWG, BN>::kThreads, 1)
    wg_kernel(void* Y, const __grid_constant__ TensorMap tx, const __grid_constant__ TensorMap tp,
              const __grid_constant__ TensorMap tu, int M, int N, int K, const uint16_t* B, int out) {
  sfs::spmm_wg::kernel<T, NWG, BN, false>(sfs::gemv::Out(Y, B, out), tx, tp, tu, M, N, K, 1);
}

struct Variant {
  const char* name;
  void (*launch)(int sms, void* Y, const uint16_t* X, const uint16_t* P, const uint32_t* U, int M, int N, int K,
                 const uint16_t* B, int out);
};

template <typename T, int NWG, int BN>
void launch_wg(int sms, void* Y, const uint16_t* X, const uint16_t* P, const uint32_t* U, int M, int N, int K,
               const uint16_t* B, int out) {
  using S = sfs::spmm_wg::Shape<NWG, BN>;
  static bool set = false;
  if (!set) {
    CK(cudaFuncSetAttribute(wg_kernel<T, NWG, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem));
    set = true;
  }
  const long tiles = static_cast<long>((M + BN - 1) / BN) * ((N + S::kRows - 1) / S::kRows);
  const int grid = static_cast<int>(tiles < sms ? tiles : sms);
  const Maps m = encode_maps<NWG, BN>(X, P, U, M, N, K);
  wg_kernel<T, NWG, BN><<<grid, S::kThreads, S::kSmem>>>(Y, m.tx, m.tp, m.tu, M, N, K, B, out);
}

template <typename T>
std::vector<Variant> variants() {
  return {{"r256_t192", launch_wg<T, 2, 192>},
          {"r256_t128", launch_wg<T, 2, 128>},
          {"r128_t128", launch_wg<T, 1, 128>},
          {"r128_t64", launch_wg<T, 1, 64>}};
}

int check(bool f16, int sms) {
  std::mt19937 rng(1234);
  int bad = 0;
  struct Case {
    int M, N, K;
  } cases[] = {{1, 256, 128},   {7, 96, 192},     {64, 512, 256},   {100, 1024, 640},
               {129, 352, 4096}, {256, 4096, 4096}, {300, 1024, 1088}, {1000, 14336, 512},
               {4096, 1024, 4096}};
  auto vs = f16 ? variants<sfs::F16>() : variants<sfs::BF16>();
  for (const Case& c : cases) {
    Problem p = make(rng, f16, c.M, c.N, c.K, true);
    const size_t n = static_cast<size_t>(c.M) * c.N;
    std::vector<float> ref(n), got(n);
    std::vector<uint16_t> got16(n), bias(c.N);
    CK(cudaMemcpy(ref.data(), p.ref, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(bias.data(), p.B, c.N * 2, cudaMemcpyDeviceToHost));
    for (const Variant& v : vs) {
      // f32, no bias; poisoned first.
      CK(cudaMemset(p.Y, 0xFF, n * 4));
      v.launch(sms, p.Y, p.X, p.P, p.U, c.M, c.N, c.K, nullptr, 0);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(got.data(), p.Y, n * 4, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      long nan = 0;
      for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(got[i])) ++nan;
        const double d = static_cast<double>(got[i]) - ref[i];
        num += d * d;
        den += static_cast<double>(ref[i]) * ref[i];
      }
      const double rel = std::sqrt(num / (den > 0 ? den : 1));
      // element type with the bias, poisoned; one ulp of slack.
      CK(cudaMemset(p.Y, 0xFF, n * 4));
      v.launch(sms, p.Y, p.X, p.P, p.U, c.M, c.N, c.K, p.B, 1);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(got16.data(), p.Y, n * 2, cudaMemcpyDeviceToHost));
      long off = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint16_t want = bits16(f16, ref[i] + f32of(f16, bias[i % c.N]));
        const int d = static_cast<int>(got16[i]) - static_cast<int>(want);
        if (d > 1 || d < -1) ++off;
      }
      // nothing written past y (element type): the next 2·n bytes stay poisoned.
      std::vector<uint16_t> tail(n);
      CK(cudaMemcpy(tail.data(), static_cast<uint16_t*>(p.Y) + n, n * 2, cudaMemcpyDeviceToHost));
      long past = 0;
      for (uint16_t t : tail) past += t != 0xFFFF;
      const bool ok = rel < 1e-5 && nan == 0 && off == 0 && past == 0;
      bad += !ok;
      printf("check %s %-10s M=%5d N=%5d K=%5d rel %.2e nonfinite %ld off-by->1ulp %ld written-past %ld %s\n",
             f16 ? "f16" : "bf16", v.name, c.M, c.N, c.K, rel, nan, off, past, ok ? "ok" : "FAIL");
    }
    release(p);
  }
  return bad;
}


int timing(bool f16, int sms) {
  std::mt19937 rng(99);
  struct Shape {
    const char* name;
    int N, K;
  } shapes[] = {{"8b q/o", 4096, 4096},    {"8b k/v", 1024, 4096},    {"8b gate/up", 14336, 4096},
                {"8b down", 4096, 14336},  {"70b q/o", 8192, 8192},   {"70b k/v", 1024, 8192},
                {"70b gate/up", 28672, 8192}, {"70b down", 8192, 28672}};
  const int ms[] = {256, 1024, 4096, 16384};
  const bool q = getenv("QUICK") != nullptr;
  const Lt lt = make_lt();
  Busy busy = make_busy(256 << 20);
  auto vs = f16 ? variants<sfs::F16>() : variants<sfs::BF16>();
  printf("%-12s %6s %10s", "shape", "M", "dense_us");
  for (const Variant& v : vs) printf(" %10s", v.name);
  printf("   best  x_dense\n");
  for (const Shape& s : shapes) {
    if (q && strcmp(s.name, "8b gate/up") && strcmp(s.name, "8b q/o") && strcmp(s.name, "70b down")) continue;
    for (int M : ms) {
      if (q && M != 256 && M != 4096) continue;
      Problem p = make(rng, f16, M, s.N, s.K, false);
      uint16_t* Wd;
      CK(cudaMalloc(&Wd, static_cast<size_t>(s.N) * s.K * 2));
      CK(cudaMemset(Wd, 0x3c, static_cast<size_t>(s.N) * s.K * 2));
      Dense d(lt, f16 ? CUDA_R_16F : CUDA_R_16BF, f16 ? CUDA_R_16F : CUDA_R_16BF, M, s.N, s.K);
      const float tdense = timeit(busy, [&](int) { d.run(p.Y, p.X, Wd); });
      printf("%-12s %6d %10.1f", s.name, M, tdense);
      float best = 1e30f;
      const char* bn = "";
      for (const Variant& v : vs) {
        const float t = timeit(busy, [&](int) { v.launch(sms, p.Y, p.X, p.P, p.U, M, s.N, s.K, p.B, 1); });
        printf(" %10.1f", t);
        if (t < best) best = t, bn = v.name;
      }
      printf("  %s %.2fx\n", bn, tdense / best);
      fflush(stdout);
      CK(cudaFree(Wd));
      release(p);
    }
  }
  return 0;
}

// one runs variant v (its index) on one problem `reps` times: for ncu.
int one(bool f16, int sms, int v, int M, int N, int K, int reps) {
  std::mt19937 rng(5);
  Problem p = make(rng, f16, M, N, K, false);
  auto vs = f16 ? variants<sfs::F16>() : variants<sfs::BF16>();
  for (int i = 0; i < reps; ++i) vs[v].launch(sms, p.Y, p.X, p.P, p.U, M, N, K, p.B, 1);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  release(p);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 7 && !strcmp(argv[1], "one")) {
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return one(false, sms, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
  }
  bool f16 = false, doCheck = true, doTime = true;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "f16")) f16 = true;
    if (!strcmp(argv[i], "check")) doTime = false;
    if (!strcmp(argv[i], "time")) doCheck = false;
  }
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int bad = 0;
  if (doCheck) bad = check(f16, sms);
  if (doTime) timing(f16, sms);
  printf("%s\n", bad ? "CHECK FAILED" : "checks ok");
  return bad ? 1 : 0;
}
