// Copy-loop tuning: the shape of cb_move (block = contiguous slice, threads
// stride with U vectors in flight) against cudaMemcpyAsync.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <int U, int MODE>
__global__ void copyk(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t nv_total, int pieces) {
  // pieces: slices per block (a channel walks several steps)
  size_t per_block = nv_total / gridDim.x;
  size_t base = per_block * blockIdx.x;
  size_t step = per_block / pieces;
  for (int p = 0; p < pieces; p++) {
    const uint4 *s = src + base + p * step;
    uint4 *d = dst + base + p * step;
    size_t nv = step;
    size_t nt = blockDim.x, i = threadIdx.x;
    for (; i + (U - 1) * nt < nv; i += U * nt) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (MODE == 1) v[u] = __ldcs(s + i + u * nt);
        else if (MODE == 2) v[u] = __ldg(s + i + u * nt);
        else v[u] = s[i + u * nt];
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (MODE == 1) __stcs(d + i + u * nt, v[u]);
        else d[i + u * nt] = v[u];
      }
    }
    for (; i < nv; i += nt) d[i] = s[i];
    __syncthreads();
  }
}
template <int U, int MODE>
float timeit(const uint4 *s, uint4 *d, size_t bytes, int blocks, int threads, int pieces) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  size_t nv = bytes / 16;
  for (int k = 0; k < 3; k++) copyk<U, MODE><<<blocks, threads>>>(s, d, nv, pieces);
  cudaEventRecord(a);
  int it = 20;
  for (int k = 0; k < it; k++) copyk<U, MODE><<<blocks, threads>>>(s, d, nv, pieces);
  cudaEventRecord(b); cudaEventSynchronize(b);
  float ms; cudaEventElapsedTime(&ms, a, b);
  return bytes / (ms * 1e-3 / it) / 1e9;
}
int main() {
  size_t sizes[] = {16u << 20, 256u << 20, 1u << 30};
  uint4 *s, *d; cudaMalloc(&s, 1u << 30); cudaMalloc(&d, 1u << 30);
  cudaMemset(s, 1, 1u << 30);
  for (size_t bytes : sizes) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int k = 0; k < 3; k++) cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(a);
    for (int k = 0; k < 20; k++) cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    printf("%5zuM memcpy %.0f GB/s\n", bytes >> 20, bytes / (ms * 1e-3 / 20) / 1e9);
    int blocks[] = {128, 132, 256, 264, 528};
    int threads[] = {256, 512, 1024};
    for (int bl : blocks) for (int th : threads) for (int pieces : {1, 8}) {
      printf("%5zuM b%d t%d p%d: U4 %.0f U8 %.0f U4cs %.0f U8cs %.0f U8ldg %.0f U16 %.0f\n", bytes >> 20, bl, th, pieces,
        timeit<4, 0>(s, d, bytes, bl, th, pieces), timeit<8, 0>(s, d, bytes, bl, th, pieces),
        timeit<4, 1>(s, d, bytes, bl, th, pieces), timeit<8, 1>(s, d, bytes, bl, th, pieces),
        timeit<8, 2>(s, d, bytes, bl, th, pieces), timeit<16, 0>(s, d, bytes, bl, th, pieces));
    }
  }
  cudaError_t e = cudaGetLastError(); printf("last error: %s\n", cudaGetErrorString(e));
}
